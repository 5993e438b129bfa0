package aap

// SealListCursor is a cursor as the gateway gives them out to key keyID: resuming after
// last on the upstream page fetched with after (nil: the first).
func (g *Gateway) SealListCursor(keyID string, after *string, last string) string {
	return g.sealListCursor(listCursor{After: after, Last: last}, keyID)
}
