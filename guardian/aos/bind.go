package aos

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Binding: one function per AOS object reads it from the decoder and validates required
// fields and allowed values as it goes. Each records which required members it saw in a
// bit set whose bit order matches the names passed to require.

// list reads an array whose elements elem decodes in place.
func list[T any](d *decoder, elem func(*decoder, *T)) []T {
	if !d.enterArray() {
		return nil
	}
	out := []T{}
	for d.nextElem() {
		var zero T
		out = append(out, zero)
		elem(d, &out[len(out)-1])
	}
	return out
}

// optList is list for an array that may also be null.
func optList[T any](d *decoder, elem func(*decoder, *T)) []T {
	if d.null() {
		return nil
	}
	return list(d, elem)
}

// at decodes, with fn, the member name of the object just closed, whose value starts at
// pos. It is for members whose meaning depends on a later member (a part's kind).
func (d *decoder) at(pos int, name string, fn func()) {
	saved := d.pos
	d.pos = pos
	d.push(false)
	d.stack[d.nf-1].key = []byte(name)
	d.stack[d.nf-1].n = 1
	fn()
	if d.err != nil {
		return
	}
	d.pop()
	d.pos = saved
}

func typeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}

// strOf checks that the member name, read earlier as v, is a string; has says whether it
// was present and required whether it must be.
func (d *decoder) strOf(v any, has, required bool, name string) string {
	if !has || v == nil && !required {
		if required {
			d.missing(name)
		}
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.invalidField(name, "must be a string, not "+typeOf(v))
	}
	return s
}

// oneOf reports the current value unless it is one of allowed.
func (d *decoder) oneOf(v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	d.invalid("must be one of " + quoteList(allowed) + `, not "` + clip(v) + `"`)
}

func quoteList(xs []string) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"` + x + `"`)
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

// timestamp reads an ISO 8601 timestamp.
func (d *decoder) timestamp() (string, time.Time) {
	s := d.str()
	if d.err != nil {
		return "", time.Time{}
	}
	t, ok := parseTimestamp(s)
	if !ok {
		d.invalid(`must be an ISO 8601 timestamp such as "2025-01-02T15:04:05Z", not "` + clip(s) + `"`)
	}
	return s, t
}

// Layouts for the ISO 8601 profiles agents send: RFC 3339, offsets without a colon or
// without minutes, no zone (read as UTC), a space instead of T, and a bare date.
var timestampLayouts = [...]string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999Z07",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
}

// parseTimestamp reads s in one of timestampLayouts. RFC 3339 §5.6 also allows "t" and
// "z" in lower case, which time.Parse does not: such a timestamp is read again with them
// in upper case, only after the layouts failed, so the usual form costs nothing more.
func parseTimestamp(s string) (time.Time, bool) {
	if t, ok := parseLayouts(s); ok {
		return t, true
	}
	if strings.ContainsAny(s, "tz") {
		return parseLayouts(strings.Map(upperTZ, s))
	}
	return time.Time{}, false
}

func parseLayouts(s string) (time.Time, bool) {
	for _, l := range timestampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// upperTZ maps the RFC 3339 separators "t" and "z" to upper case, leaving any other rune.
func upperTZ(r rune) rune {
	switch r {
	case 't':
		return 'T'
	case 'z':
		return 'Z'
	}
	return r
}

// ---- §3 objects ----

func (d *decoder) stepContext(c *StepContext) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "agent":
			d.agent(&c.Agent)
			has |= 1
		case "session":
			d.session(&c.Session)
			has |= 2
		case "turnId":
			c.TurnID = d.id()
			has |= 4
		case "stepId":
			c.StepID = d.id()
			has |= 8
		case "timestamp":
			c.Timestamp, c.Time = d.timestamp()
			has |= 16
		case "user":
			if !d.null() {
				c.User = new(User)
				d.user(c.User)
			}
		default:
			d.skip()
		}
	}
	d.require(has, "agent", "session", "turnId", "stepId", "timestamp")
}

func (d *decoder) agent(a *Agent) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			a.Name = d.id()
			has |= 1
		case "id":
			a.ID = d.id()
			has |= 2
		case "instructions":
			a.Instructions = d.str()
			has |= 4
		case "version":
			a.Version = d.str()
			has |= 8
		case "provider":
			d.agentProvider(&a.Provider)
			has |= 16
		case "description":
			a.Description = d.optStr()
		case "url":
			a.URL = d.optStr()
		case "model":
			if !d.null() {
				a.Model = new(Model)
				d.model(a.Model)
			}
		case "tools":
			a.Tools = optList(d, (*decoder).toolDefinition)
		case "mcpServers":
			a.MCPServers = optList(d, (*decoder).mcpServer)
		case "resources":
			a.Resources = optList(d, (*decoder).resource)
		case "organization":
			if !d.null() {
				a.Organization = new(Organization)
				d.organization(a.Organization)
			}
		case "metadata":
			a.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "id", "instructions", "version", "provider")
}

func (d *decoder) agentProvider(p *AgentProvider) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			p.Name = d.str()
			has |= 1
		case "url":
			p.URL = d.str()
			has |= 2
		case "metadata":
			p.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "url")
}

func (d *decoder) model(m *Model) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			m.Name = d.str()
			has |= 1
		case "id":
			m.ID = d.str()
			has |= 2
		case "provider":
			d.llmProvider(&m.Provider)
			has |= 4
		case "type":
			m.Type = d.optStr()
		case "maxTokens":
			if !d.null() {
				m.MaxTokens = d.integer()
			}
		case "contextWindow":
			if !d.null() {
				m.ContextWindow = d.integer()
			}
		case "stopSequences":
			m.StopSequences = d.optStrs()
		case "defaultParams":
			m.DefaultParams = d.object()
		case "metadata":
			m.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "id", "provider")
}

func (d *decoder) llmProvider(p *LlmProvider) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			p.Name = d.str()
			has |= 1
		case "metadata":
			p.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "name")
}

func (d *decoder) mcpServer(s *MCPServer) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			s.Name = d.str()
			has |= 1
		case "version":
			s.Version = d.str()
			has |= 2
		default:
			d.skip()
		}
	}
	d.require(has, "name", "version")
}

func (d *decoder) resource(r *Resource) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			r.Name = d.str()
			has |= 1
		case "id":
			r.ID = d.str()
			has |= 2
		case "content":
			r.Content = d.str()
			has |= 4
		case "description":
			r.Description = d.optStr()
		case "mimeType":
			r.MimeType = d.optStr()
		case "metadata":
			r.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "id", "content")
}

func (d *decoder) toolDefinition(t *ToolDefinition) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			t.Name = d.str()
			has |= 1
		case "id":
			t.ID = d.str()
			has |= 2
		case "type":
			t.Type = d.str()
			has |= 4
		case "arguments":
			t.Arguments = optList(d, (*decoder).toolArgumentDefinition)
			has |= 8
		case "outputs":
			t.Outputs = optList(d, (*decoder).toolOutputDefinition)
			has |= 16
		case "description":
			t.Description = d.optStr()
		case "metadata":
			t.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "id", "type", "arguments", "outputs")
}

// valueType reads the type of a tool argument or output.
func (d *decoder) valueType() string {
	s := d.optStr()
	if s != "" {
		d.oneOf(s, "string", "number", "integer", "boolean", "object", "array", "null")
	}
	return s
}

func (d *decoder) toolArgumentDefinition(a *ToolArgumentDefinition) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			a.Name = d.str()
			has |= 1
		case "required":
			a.Required = d.boolean()
			has |= 2
		case "id":
			a.ID = d.optStr()
		case "description":
			a.Description = d.optStr()
		case "type":
			a.Type = d.valueType()
		case "mimeType":
			a.MimeType = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "required")
}

func (d *decoder) toolOutputDefinition(o *ToolOutputDefinition) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			o.Name = d.str()
			has |= 1
		case "id":
			o.ID = d.optStr()
		case "description":
			o.Description = d.optStr()
		case "type":
			o.Type = d.valueType()
		case "mimeType":
			o.MimeType = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "name")
}

func (d *decoder) session(s *Session) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "id":
			s.ID = d.id()
			has |= 1
		case "metadata":
			s.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "id")
	if has&1 != 0 && s.ID == "" && !d.stored {
		// AOS §3.9: the session's unique identifier. Read as absent, "" would file the step
		// under the X-Vigil-Session header or "<kind>@<address>" instead, a session per step
		// kind that the agent never named. Checked on the id that counts, the last one, as
		// "." and ".." are.
		d.invalidField("id", sessionEmpty)
	}
}

func (d *decoder) user(u *User) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "id":
			u.ID = d.id()
			has |= 1
		case "organization":
			d.organization(&u.Organization)
			has |= 2
		case "name":
			u.Name = d.optStr()
		case "email":
			u.Email = d.optStr()
		case "metadata":
			u.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "id", "organization")
}

func (d *decoder) organization(o *Organization) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "id":
			o.ID = d.str()
			has |= 1
		case "name":
			o.Name = d.optStr()
		case "metadata":
			o.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "id")
}

func (d *decoder) message(m *Message) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "id":
			m.ID = d.str()
			has |= 1
		case "role":
			m.Role = d.str()
			if d.err == nil {
				d.oneOf(m.Role, RoleUser, RoleAgent, RoleSystem)
			}
			has |= 2
		case "content":
			m.Content = d.parts()
			has |= 4
		case "metadata":
			m.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "id", "role", "content")
}

// parts reads a Part[] that must hold at least one part.
func (d *decoder) parts() []Part {
	if !d.enterArray() {
		return nil
	}
	out := []Part{}
	for d.nextElem() {
		out = append(out, d.part())
	}
	if d.err == nil && len(out) == 0 {
		d.invalid("must contain at least one part")
	}
	return out
}

// part reads one Part. Its members are read before its kind is known (members come in any
// order), then checked against the kind. A part without kind gets the kind its members
// imply, as the schema's defaults allow.
func (d *decoder) part() Part {
	if !d.enterObject() {
		return nil
	}
	var (
		kind                      string
		hasKind, hasText, hasData bool
		text, data                any
		dataRaw                   json.RawMessage
		meta                      map[string]any
		fileAt                    = -1
	)
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "kind":
			kind = d.str()
			hasKind = true
		case "text":
			text = d.anyValue()
			hasText = true
		case "file":
			d.ws()
			fileAt = d.pos
			d.skip()
		case "data":
			d.ws()
			start, long := d.pos, d.longNumbers
			data = d.anyValue()
			if d.err == nil && d.longNumbers != long {
				dataRaw = json.RawMessage(d.buf[start:d.pos])
			}
			hasData = true
		case "metadata":
			meta = d.object()
		default:
			d.skip()
		}
	}
	if d.err != nil {
		return nil
	}
	if !hasKind {
		switch {
		case hasText:
			kind = "text"
		case fileAt >= 0:
			kind = "file"
		case hasData:
			kind = "data"
		default:
			d.missing("kind")
			return nil
		}
	}
	switch kind {
	case "text":
		return TextPart{Text: d.strOf(text, hasText, true, "text"), Metadata: meta}
	case "file":
		if fileAt < 0 {
			d.missing("file")
			return nil
		}
		var f FileContent
		d.at(fileAt, "file", func() { f = d.file() })
		return FilePart{File: f, Metadata: meta}
	case "data":
		if !hasData {
			d.missing("data")
			return nil
		}
		switch data.(type) {
		case map[string]any, []any:
		default:
			d.invalidField("data", "must be an object or an array, not "+typeOf(data))
		}
		return DataPart{Data: data, Metadata: meta, raw: dataRaw}
	}
	d.invalidField("kind", `must be one of "text", "file", "data", not "`+clip(kind)+`"`)
	return nil
}

// file reads FileWithBytes or FileWithUri: exactly one of bytes and uri.
func (d *decoder) file() FileContent {
	if !d.enterObject() {
		return nil
	}
	var name, mime, data, uri string
	var hasBytes, hasURI bool
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			name = d.optStr()
		case "mimeType":
			mime = d.optStr()
		case "bytes":
			data = d.str()
			hasBytes = true
		case "uri":
			uri = d.str()
			hasURI = true
		default:
			d.skip()
		}
	}
	switch {
	case d.err != nil:
		return nil
	case hasBytes && hasURI:
		d.invalid("must have either bytes or uri, not both")
		return nil
	case hasBytes:
		return FileWithBytes{Name: name, MimeType: mime, Bytes: data}
	case hasURI:
		return FileWithURI{Name: name, MimeType: mime, URI: uri}
	}
	d.invalid("must have bytes or uri")
	return nil
}

// textPart reads a TextPart where only text parts are allowed (tool outputs).
func (d *decoder) textPart(p *TextPart) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "kind":
			if kind := d.str(); d.err == nil && kind != "text" {
				d.invalid(`must be "text", not "` + clip(kind) + `"`)
			}
		case "text":
			p.Text = d.str()
			has |= 1
		case "metadata":
			p.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "text")
}

func (d *decoder) trigger(t *AgentTrigger) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "type":
			t.Type = d.str()
			if d.err == nil {
				d.oneOf(t.Type, TriggerAutonomous)
			}
			has |= 1
		case "event":
			d.triggerEvent(&t.Event)
			has |= 2
		case "content":
			t.Content = d.parts()
			has |= 4
		case "metadata":
			t.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "type", "event", "content")
}

func (d *decoder) triggerEvent(e *AgentTriggerEvent) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "type":
			e.Type = d.str()
			has |= 1
		case "id":
			e.ID = d.str()
			has |= 2
		default:
			d.skip()
		}
	}
	d.require(has, "type", "id")
}

// source reads a FileSource or SiteSource; like parts, members are checked once the kind
// is known.
func (d *decoder) source(out *Source) {
	if !d.enterObject() {
		return
	}
	var kind string
	var id, name, url any
	var hasKind, hasID, hasName, hasURL bool
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "kind":
			kind = d.str()
			hasKind = true
		case "id":
			id, hasID = d.anyValue(), true
		case "name":
			name, hasName = d.anyValue(), true
		case "url":
			url, hasURL = d.anyValue(), true
		default:
			d.skip()
		}
	}
	switch {
	case d.err != nil:
	case !hasKind:
		d.missing("kind")
	case kind == "file":
		s := FileSource{ID: d.strOf(id, hasID, true, "id")}
		s.Name = d.strOf(name, hasName, true, "name")
		s.URL = d.strOf(url, hasURL, false, "url")
		*out = s
	case kind == "site":
		*out = SiteSource{URL: d.strOf(url, hasURL, true, "url")}
	default:
		d.invalidField("kind", `must be one of "file", "site", not "`+clip(kind)+`"`)
	}
}

func (d *decoder) knowledgeStep(k *KnowledgeRetrievalStepParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		key, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(key) {
		case "results":
			k.Results = list(d, (*decoder).knowledgeResult)
			has |= 1
		case "query":
			k.Query = d.optStr()
		case "keywords":
			k.Keywords = d.optStrs()
		default:
			d.skip()
		}
	}
	d.require(has, "results")
}

func (d *decoder) knowledgeResult(r *KnowledgeRetrievalResult) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "id":
			r.ID = d.str()
			has |= 1
		case "content":
			r.Content = d.str()
			has |= 2
		case "mimeType":
			r.MimeType = d.optStr()
		case "metadata":
			r.Metadata = d.object()
		default:
			d.skip()
		}
	}
	d.require(has, "id", "content")
}

func (d *decoder) toolCallRequest(t *ToolCallRequest) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "executionId":
			t.ExecutionID = d.str()
			has |= 1
		case "toolId":
			t.ToolID = d.id()
			has |= 2
		case "inputs":
			t.Inputs = list(d, (*decoder).toolArgumentValue)
			if i, j, ok := repeatedName(t.Inputs); ok && d.err == nil {
				// The path is still the inputs member's own.
				d.err = fieldError(d.code, d.path()+"["+strconv.Itoa(j)+"].name",
					"repeats the name of inputs["+strconv.Itoa(i)+"]: rules read an input by its name, so two values of one name are ambiguous")
			}
			has |= 4
		default:
			d.skip()
		}
	}
	d.require(has, "executionId", "toolId", "inputs")
}

// repeatedName finds the first input whose name an earlier one has: i the earlier, j the
// later. A tool call naming an input twice is refused, since a rule reading inputs.NAME
// sees one value while the tool may use the other.
func repeatedName(in []ToolArgumentValue) (i, j int, ok bool) {
	if len(in) <= 16 {
		// A few inputs, the usual case: comparing them costs less than a map.
		for j := 1; j < len(in); j++ {
			for i := range j {
				if in[i].Name == in[j].Name {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	seen := make(map[string]int, len(in))
	for j, v := range in {
		if i, dup := seen[v.Name]; dup {
			return i, j, true
		}
		seen[v.Name] = j
	}
	return 0, 0, false
}

func (d *decoder) toolArgumentValue(v *ToolArgumentValue) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "name":
			v.Name = d.str()
			has |= 1
		case "value":
			d.ws()
			start, long := d.pos, d.longNumbers
			v.Value = d.anyValue()
			if d.err == nil && d.longNumbers != long {
				v.raw = json.RawMessage(d.buf[start:d.pos])
			}
			has |= 2
		case "id":
			v.ID = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "name", "value")
}

func (d *decoder) toolCallResult(r *ToolCallResult) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "outputs":
			r.Outputs = list(d, (*decoder).textPart)
			has |= 1
		case "isError":
			r.IsError = d.boolean()
			has |= 2
		default:
			d.skip()
		}
	}
	d.require(has, "outputs", "isError")
}

// ---- §4 params ----

func (d *decoder) agentTriggerParams(p *AgentTriggerParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "context":
			d.stepContext(&p.Context)
			has |= 1
		case "trigger":
			d.trigger(&p.Trigger)
			has |= 2
		case "reasoning":
			p.Reasoning = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "context", "trigger")
}

func (d *decoder) knowledgeParams(p *KnowledgeRetrievalParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "context":
			d.stepContext(&p.Context)
			has |= 1
		case "knowledgeStep":
			d.knowledgeStep(&p.KnowledgeStep)
			has |= 2
		case "reasoning":
			p.Reasoning = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "context", "knowledgeStep")
}

func (d *decoder) memoryParams(p *MemoryParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "context":
			d.stepContext(&p.Context)
			has |= 1
		case "memory":
			p.Memory = d.strs()
			has |= 2
		case "reasoning":
			p.Reasoning = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "context", "memory")
}

func (d *decoder) messageParams(p *MessageParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "context":
			d.stepContext(&p.Context)
			has |= 1
		case "message":
			d.message(&p.Message)
			has |= 2
		case "citations", "citation":
			p.Citations = append(p.Citations, optList(d, (*decoder).source)...)
		case "reasoning":
			p.Reasoning = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "context", "message")
}

func (d *decoder) toolCallRequestParams(p *ToolCallRequestParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "context":
			d.stepContext(&p.Context)
			has |= 1
		case "toolCallRequest":
			d.toolCallRequest(&p.ToolCallRequest)
			has |= 2
		case "reasoning":
			p.Reasoning = d.optStr()
		default:
			d.skip()
		}
	}
	d.require(has, "context", "toolCallRequest")
}

func (d *decoder) toolCallResultParams(p *ToolCallResultParams) {
	if !d.enterObject() {
		return
	}
	const (
		hasContext = 1 << iota
		hasExecutionID
		hasResult
		hasNested
	)
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "context":
			d.stepContext(&p.Context)
			has |= hasContext
		case "executionId":
			p.ExecutionID = d.str()
			has |= hasExecutionID
		case "result":
			d.toolCallResult(&p.Result)
			has |= hasResult
		case "toolCallResult":
			d.nestedToolCallResult(p)
			has |= hasNested
		case "reasoning":
			p.Reasoning = d.optStr()
		default:
			d.skip()
		}
	}
	if has&hasNested != 0 {
		// Two layouts at once could show the guardian one result and the model another.
		if has&(hasExecutionID|hasResult) != 0 {
			d.invalidField("toolCallResult", "must not be combined with executionId or result directly in params")
			return
		}
		p.Nested = true
		d.require(has, "context")
		return
	}
	d.require(has, "context", "executionId", "result")
}

func (d *decoder) nestedToolCallResult(p *ToolCallResultParams) {
	if !d.enterObject() {
		return
	}
	var has uint32
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "executionId":
			p.ExecutionID = d.str()
			has |= 1
		case "result":
			d.toolCallResult(&p.Result)
			has |= 2
		default:
			d.skip()
		}
	}
	d.require(has, "executionId", "result")
}

func (d *decoder) pingParams(p *PingParams) {
	if !d.enterObject() {
		return
	}
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "timestamp":
			if !d.null() {
				p.Timestamp, p.Time = d.timestamp()
			}
		case "timeout":
			if !d.null() {
				p.Timeout = d.integer()
				if d.err == nil && p.Timeout < 0 {
					d.invalid("must not be negative")
				}
			}
		case "metadata":
			p.Metadata = d.object()
		default:
			d.skip()
		}
	}
}

// longNumber reports whether raw, a JSON number, has 16 digits or more: shorter ones a
// float64 holds exactly (it keeps 15 to 17 significant digits), so only these can lose
// digits when decoded.
func longNumber(raw []byte) bool {
	run := 0
	for _, c := range raw {
		if c >= '0' && c <= '9' {
			if run++; run >= 16 {
				return true
			}
			continue
		}
		run = 0
	}
	return false
}
