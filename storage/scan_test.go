package storage

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeRows are rows of ints; scanErr fails the scan of the row at that index, err is what
// Err reports after the last row.
type fakeRows struct {
	vals    []int
	i       int
	scanErr int
	err     error
}

func (r *fakeRows) Next() bool { r.i++; return r.i <= len(r.vals) }
func (r *fakeRows) Err() error { return r.err }
func (r *fakeRows) Scan(dest ...any) error {
	if r.i-1 == r.scanErr {
		return errors.New("bad row")
	}
	*dest[0].(*int) = r.vals[r.i-1]
	return nil
}

func scanInt(sc Scanner) (int, error) {
	var v int
	err := sc.Scan(&v)
	return v, err
}

func TestCollect(t *testing.T) {
	broken := errors.New("connection lost")
	for _, tc := range []struct {
		name    string
		rows    *fakeRows
		dst     []int
		want    []int
		wantErr string
	}{
		{"every row, in order", &fakeRows{vals: []int{3, 1, 2}, scanErr: -1}, nil, []int{3, 1, 2}, ""},
		{"appended to dst", &fakeRows{vals: []int{7}, scanErr: -1}, []int{5}, []int{5, 7}, ""},
		{"no rows keeps an empty dst (a JSON [])", &fakeRows{scanErr: -1}, []int{}, []int{}, ""},
		{"no rows and no dst is nil", &fakeRows{scanErr: -1}, nil, nil, ""},
		{"a row that does not scan", &fakeRows{vals: []int{1, 2}, scanErr: 1}, nil, nil, "bad row"},
		{"the rows' own error after the last", &fakeRows{vals: []int{1}, scanErr: -1, err: broken}, nil, nil, "connection lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Collect(tc.rows, tc.dst, scanInt)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
