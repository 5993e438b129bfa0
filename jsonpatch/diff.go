// Package jsonpatch computes JSON Patches (RFC 6902) between two JSON documents, for the
// audit log: what an operator changed in a held step, or in a rule.
package jsonpatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Op is one operation of a JSON Patch (RFC 6902). Old is not part of the RFC (which
// says appliers ignore unknown members): it keeps the replaced or removed value, so the
// audit log shows what an operator changed from, not only what to.
type Op struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
	Old   json.RawMessage `json:"old,omitempty"`
}

// Diff returns the JSON Patch that turns before into after: objects are compared key by key
// (in sorted order, so the patch is deterministic), arrays index by index with additions
// and removals at the end, and anything else is replaced whole. Applied in order, the
// operations produce after. Numbers are compared by value (1 equals 1.0). Empty input is
// read as null.
func Diff(before, after json.RawMessage) ([]Op, error) {
	a, err := decodeDiffValue(before)
	if err != nil {
		return nil, fmt.Errorf("diff: before: %w", err)
	}
	b, err := decodeDiffValue(after)
	if err != nil {
		return nil, fmt.Errorf("diff: after: %w", err)
	}
	ops := []Op{}
	if err := diffValues("", a, b, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

func decodeDiffValue(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func diffValues(path string, a, b any, ops *[]Op) error {
	if jsonEqual(a, b) {
		return nil
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := path + "/" + escapePointer(k)
			av, inA := am[k]
			bv, inB := bm[k]
			switch {
			case inA && inB:
				if err := diffValues(p, av, bv, ops); err != nil {
					return err
				}
			case inA:
				if err := addOp(ops, "remove", p, nil, av, false, true); err != nil {
					return err
				}
			default:
				if err := addOp(ops, "add", p, bv, nil, true, false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	as, aIsArr := a.([]any)
	bs, bIsArr := b.([]any)
	if aIsArr && bIsArr {
		common := min(len(as), len(bs))
		for i := range common {
			if err := diffValues(path+"/"+strconv.Itoa(i), as[i], bs[i], ops); err != nil {
				return err
			}
		}
		for i := common; i < len(bs); i++ {
			if err := addOp(ops, "add", path+"/"+strconv.Itoa(i), bs[i], nil, true, false); err != nil {
				return err
			}
		}
		// Remove from the end so that each index is still valid when its op is applied.
		for i := len(as) - 1; i >= common; i-- {
			if err := addOp(ops, "remove", path+"/"+strconv.Itoa(i), nil, as[i], false, true); err != nil {
				return err
			}
		}
		return nil
	}
	return addOp(ops, "replace", path, b, a, true, true)
}

func addOp(ops *[]Op, op, path string, value, old any, withValue, withOld bool) error {
	o := Op{Op: op, Path: path}
	if withValue {
		v, err := json.Marshal(value)
		if err != nil {
			return fmt.Errorf("diff: encode %s: %w", path, err)
		}
		o.Value = v
	}
	if withOld {
		v, err := json.Marshal(old)
		if err != nil {
			return fmt.Errorf("diff: encode %s: %w", path, err)
		}
		o.Old = v
	}
	*ops = append(*ops, o)
	return nil
}

// escapePointer escapes one JSON Pointer (RFC 6901) reference token.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numbersEqual(x, y)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// numbersEqual compares JSON numbers exactly, whatever their spelling (1, 1.0, 1e0).
func numbersEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	if hugeExponent(a) || hugeExponent(b) {
		// big.Rat would expand 1e999999999 digit by digit; float64 is exact enough there.
		x, errx := strconv.ParseFloat(string(a), 64)
		y, erry := strconv.ParseFloat(string(b), 64)
		return errx == nil && erry == nil && x == y
	}
	x, okx := new(big.Rat).SetString(string(a))
	y, oky := new(big.Rat).SetString(string(b))
	return okx && oky && x.Cmp(y) == 0
}

func hugeExponent(n json.Number) bool {
	s := string(n)
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return false
	}
	e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
	return err != nil || e > 400 || e < -400
}
