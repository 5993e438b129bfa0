package record

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrInvalidCursor is returned by Sessions for a Before cursor it did not issue.
var ErrInvalidCursor = errors.New("invalid cursor")

// SessionCursor is the cursor of the page that follows s, for a caller that ends a page
// early (the console API ends one at its byte bound).
func SessionCursor(s Session) string { return EncodeCursor(s.LastSeen.UnixNano(), s.ID) }

// A cursor is the (last_seen, id) of the last session on a page, opaque to clients.
func EncodeCursor(lastSeen int64, id string) string {
	b, _ := json.Marshal([]any{lastSeen, id}) // an int and a string always marshal
	return base64.RawURLEncoding.EncodeToString(b)
}

func DecodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q", ErrInvalidCursor, c)
	}
	var (
		parts    []json.RawMessage
		lastSeen int64
		id       string
	)
	if json.Unmarshal(b, &parts) != nil || len(parts) != 2 ||
		json.Unmarshal(parts[0], &lastSeen) != nil || json.Unmarshal(parts[1], &id) != nil {
		return 0, "", fmt.Errorf("%w: %q", ErrInvalidCursor, c)
	}
	return lastSeen, id, nil
}
