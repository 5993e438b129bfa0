package rules

import (
	"regexp"
	"sort"
	"strings"
)

// PII kinds as returned by piiKinds() and accepted by modify.redact.
const (
	PIIEmail      = "email"
	PIIPhone      = "phone"
	PIICreditCard = "creditCard"
	PIIIBAN       = "iban"
	PIISSN        = "ssn"
)

// piiKindOrder is the order piiKinds() reports kinds in.
var piiKindOrder = []string{PIIEmail, PIIPhone, PIICreditCard, PIIIBAN, PIISSN}

// span is one finding in a string: s[start:end] of a kind.
type span struct {
	start, end int
	kind       string
}

// The detectors scan by hand for candidates (an '@', a run of digits, two capitals and two
// digits) and only then apply these regular expressions to the short candidate window,
// followed by checks in code (Luhn, mod-97, boundaries, SSN ranges): the patterns alone
// match too much, and running them over a whole step's text costs far too much per step.
var (
	ssnRe = regexp.MustCompile(`\d{3}-\d{2}-\d{4}`)
	// Phones: international with a leading +, North American 3-3-4, and national numbers
	// with a trunk 0. Bare digit runs are not phones: too many order numbers look alike.
	phoneIntlRe = longest(`\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?)(?:[ .-]?\d{2,5}){1,5}`)
	phoneNARe   = longest(`(?:1[ .-]?)?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])\d{3}[ .-]\d{4}`)
	phoneNatRe  = longest(`0\d{2,4}[ .-]\d{3,4}[ .-]\d{3,4}`)
)

// longest compiles a pattern with leftmost-longest matching: a phone number should not end
// one digit early because an alternative matched first.
func longest(pattern string) *regexp.Regexp {
	re := regexp.MustCompile(pattern)
	re.Longest()
	return re
}

// findPII returns the PII spans of s in order, without overlaps.
func findPII(s string) []span {
	var cards, ssns, phones []span
	for _, w := range numberWindows(s) {
		cards = append(cards, shift(findCards(s[w.start:w.end]), w.start, s)...)
		ssns = append(ssns, shift(findSSNs(s[w.start:w.end]), w.start, s)...)
		phones = append(phones, shift(findPhones(s[w.start:w.end]), w.start, s)...)
	}
	// Earlier kinds win an overlap: a card is not also a phone number.
	out := mergeFree(nil, cards)
	out = mergeFree(out, findIBANs(s))
	out = mergeFree(out, ssns)
	out = mergeFree(out, findEmails(s))
	out = mergeFree(out, phones)
	return out
}

// numberWindows returns the runs of digits and number punctuation (space - . ( ) +) that
// hold at least 7 digits: the only places a card, SSN or phone number can be.
func numberWindows(s string) []span {
	var out []span
	for i := 0; i < len(s); {
		c := s[i]
		if !isDigit(c) && c != '+' && c != '(' {
			i++
			continue
		}
		j, digits, end := i, 0, -1
		for ; j < len(s); j++ {
			c := s[j]
			if isDigit(c) {
				digits++
				end = j + 1
			} else if c == ')' {
				end = j + 1
			} else if c != ' ' && c != '-' && c != '.' && c != '(' && c != '+' {
				break
			}
		}
		if digits >= 7 && end > i {
			out = append(out, span{i, end, ""})
		}
		i = max(j, i+1)
	}
	return out
}

// shift moves spans found in the window s[off:] to positions in s, keeping those that
// stand alone in the whole string.
func shift(spans []span, off int, s string) []span {
	out := spans[:0]
	for _, sp := range spans {
		sp.start += off
		sp.end += off
		if standsAlone(s, sp.start, sp.end) {
			out = append(out, sp)
		}
	}
	return out
}

// mergeFree returns have (sorted, without overlaps) plus the spans of add that overlap
// neither have nor an earlier span of add, sorted by start. Linear after sorting add, so
// text with thousands of findings stays cheap.
func mergeFree(have, add []span) []span {
	if len(add) == 0 {
		return have
	}
	sort.SliceStable(add, func(i, j int) bool { return add[i].start < add[j].start })
	out := make([]span, 0, len(have)+len(add))
	j, lastEnd := 0, -1
	for _, a := range add {
		if a.start < lastEnd {
			continue // overlaps an earlier span of add
		}
		for j < len(have) && have[j].end <= a.start {
			out = append(out, have[j])
			j++
		}
		if j < len(have) && have[j].start < a.end {
			continue
		}
		out = append(out, a)
		lastEnd = a.end
	}
	out = append(out, have[j:]...)
	return out
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// standsAlone reports whether s[start:end] is not glued to a longer number or word: no
// letter or digit touches it, and no "1.5"/"1-5"/"1,5"-style continuation of digits.
func standsAlone(s string, start, end int) bool {
	if start > 0 {
		c := s[start-1]
		if isAlnum(c) || c == '+' || c == '_' {
			return false
		}
		if (c == '.' || c == '-' || c == ',' || c == '/') && start > 1 && isDigit(s[start-2]) {
			return false
		}
	}
	if end < len(s) {
		c := s[end]
		if isAlnum(c) || c == '_' {
			return false
		}
		if (c == '.' || c == '-' || c == ',' || c == '/') && end+1 < len(s) && isDigit(s[end+1]) {
			return false
		}
	}
	return true
}

func isEmailLocal(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'
}

func isLabelChar(c byte) bool { return isAlnum(c) || c == '-' }

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// findEmails finds addresses local@domain.tld. An address-looking piece of a URL (user
// info, a path segment such as /@alice or /u/bob@x.com) is part of the URL, not an email
// address; mailto: links are not URLs here and still count.
func findEmails(s string) []span {
	var out []span
	var urls []span
	urlsDone := false
	for from := 0; ; {
		k := strings.IndexByte(s[from:], '@')
		if k < 0 {
			break
		}
		at := from + k
		from = at + 1
		a := at
		for a > 0 && isEmailLocal(s[a-1]) {
			a--
		}
		for a < at && s[a] == '.' {
			a++
		}
		if a == at {
			continue
		}
		end := emailDomainEnd(s, at+1)
		if end < 0 {
			continue
		}
		if !urlsDone {
			urls, urlsDone = findURLs(s), true
		}
		inURL := false
		for _, u := range urls {
			if a < u.end && u.start < end {
				inURL = true
				break
			}
		}
		if !inURL {
			out = append(out, span{a, end, PIIEmail})
		}
		from = end
	}
	return out
}

// emailDomainEnd returns the end of the longest domain at s[i:] made of labels (letters,
// digits, inner hyphens) whose last label is 2–24 letters; -1 when there is none.
func emailDomainEnd(s string, i int) int {
	best, labels := -1, 0
	for i < len(s) {
		j := i
		for j < len(s) && isLabelChar(s[j]) {
			j++
		}
		if j == i || s[i] == '-' || s[j-1] == '-' {
			break
		}
		labels++
		if labels >= 2 && j-i >= 2 && j-i <= 24 {
			alpha := true
			for k := i; k < j; k++ {
				if !isAlpha(s[k]) {
					alpha = false
					break
				}
			}
			if alpha {
				best = j
			}
		}
		if j+1 < len(s) && s[j] == '.' && isLabelChar(s[j+1]) {
			i = j + 1
			continue
		}
		break
	}
	return best
}

// findCards finds 13–19 digit numbers that pass the Luhn check, written plain or in groups
// separated consistently by single spaces or dashes, starting with an issuer digit 2–6.
func findCards(s string) []span {
	var out []span
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		// A run of digit groups joined by single spaces or dashes.
		j := i
		for {
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			if j+1 < len(s) && (s[j] == ' ' || s[j] == '-') && isDigit(s[j+1]) {
				j++
				continue
			}
			break
		}
		out = append(out, cardsIn(s, i, j)...)
		i = j
	}
	return out
}

// cardsIn looks for cards inside the run s[start:end], trying runs of whole digit groups
// with one kind of separator, so "paid 2024-05-01 4111 1111 1111 1111 2024" still finds
// the card.
func cardsIn(s string, start, end int) []span {
	type group struct {
		start, end int
		sep        byte // separator after this group, 0 for the last
	}
	var groups []group
	gs := start
	for i := start; i < end; i++ {
		if c := s[i]; c == ' ' || c == '-' {
			groups = append(groups, group{gs, i, c})
			gs = i + 1
		}
	}
	groups = append(groups, group{gs, end, 0})
	// cum[k] is the number of digits in groups[:k].
	cum := make([]int, len(groups)+1)
	for k, g := range groups {
		cum[k+1] = cum[k] + g.end - g.start
	}
	var out []span
	for i := 0; i < len(groups); {
		// The longest run of groups from i with one separator and at most 19 digits.
		last := i - 1
		for k := i; k < len(groups) && cum[k+1]-cum[i] <= 19; k++ {
			last = k
			if groups[k].sep != groups[i].sep {
				break
			}
		}
		found := false
		a := groups[i].start
		for j := last; j >= i && cum[j+1]-cum[i] >= 13; j-- {
			b := groups[j].end
			if s[a] < '2' || s[a] > '6' || !standsAlone(s, a, b) {
				continue
			}
			if luhn(s[a:b]) {
				out = append(out, span{a, b, PIICreditCard})
				i = j + 1
				found = true
				break
			}
		}
		if !found {
			i++
		}
	}
	return out
}

// luhn checks the Luhn checksum of the digits in s (other characters are skipped).
func luhn(s string) bool {
	sum, double := 0, false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if !isDigit(c) {
			continue
		}
		d := int(c - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// ibanLengths is the IBAN length per country (ISO 13616 registry).
var ibanLengths = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
	"BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
	"DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
	"GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
	"IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
	"LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
	"MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
	"PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
	"SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
	"TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}

// findIBANs finds IBANs of a known country with the right length and a valid mod-97
// checksum, written compact or in groups separated by single spaces.
func findIBANs(s string) []span {
	var out []span
	for i := 0; i+4 <= len(s); i++ {
		if !(isUpper(s[i]) && isUpper(s[i+1]) && isDigit(s[i+2]) && isDigit(s[i+3])) ||
			i > 0 && isAlnum(s[i-1]) {
			continue
		}
		want, ok := ibanLengths[s[i:i+2]]
		if !ok {
			continue
		}
		start := i
		// Walk want upper-case letters and digits, allowing single spaces between them; the
		// IBAN must end there.
		n, end := 0, -1
		for k := start; k < len(s); k++ {
			c := s[k]
			if c == ' ' && k > start && s[k-1] != ' ' && k+1 < len(s) && s[k+1] != ' ' {
				continue
			}
			if !isDigit(c) && !isUpper(c) {
				break
			}
			n++
			if n == want {
				end = k + 1
				break
			}
		}
		if end < 0 || (end < len(s) && isAlnum(s[end])) {
			continue
		}
		if mod97(strings.ReplaceAll(s[start:end], " ", "")) == 1 {
			out = append(out, span{start, end, PIIIBAN})
			i = end - 1
		}
	}
	return out
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

// mod97 computes the ISO 7064 mod-97 of an IBAN: the first four characters move to the end
// and letters count as 10..35.
func mod97(iban string) int {
	r := iban[4:] + iban[:4]
	rem := 0
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case isDigit(c):
			rem = (rem*10 + int(c-'0')) % 97
		case c >= 'A' && c <= 'Z':
			rem = (rem*100 + int(c-'A'+10)) % 97
		default:
			return -1
		}
	}
	return rem
}

// findSSNs finds US social security numbers written AAA-GG-SSSS outside the ranges the
// SSA never issues (area 000, 666, 9xx; group 00; serial 0000).
func findSSNs(s string) []span {
	var out []span
	if !hasDigitRun(s, 3) {
		return nil
	}
	for _, m := range ssnRe.FindAllStringIndex(s, -1) {
		a, b := m[0], m[1]
		if !standsAlone(s, a, b) {
			continue
		}
		v := s[a:b]
		area, group, serial := v[0:3], v[4:6], v[7:11]
		if area == "000" || area == "666" || area[0] == '9' || group == "00" || serial == "0000" {
			continue
		}
		out = append(out, span{a, b, PIISSN})
	}
	return out
}

func findPhones(s string) []span {
	var out, found []span
	add := func(re *regexp.Regexp, minDigits, maxDigits int) {
		for _, m := range re.FindAllStringIndex(s, -1) {
			a, b := m[0], m[1]
			if !standsAlone(s, a, b) {
				continue
			}
			n := 0
			for k := a; k < b; k++ {
				if isDigit(s[k]) {
					n++
				}
			}
			if n >= minDigits && n <= maxDigits {
				found = append(found, span{a, b, PIIPhone})
			}
		}
		out = mergeFree(out, found)
		found = nil
	}
	if strings.IndexByte(s, '+') >= 0 {
		add(phoneIntlRe, 8, 15)
	}
	if hasDigitRun(s, 3) {
		add(phoneNARe, 10, 11)
		add(phoneNatRe, 10, 11)
	}
	return out
}

// hasDigitRun reports whether s has n digits in a row (every non-international phone
// format has a group of three).
func hasDigitRun(s string, n int) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if isDigit(s[i]) {
			run++
			if run >= n {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// spanStrings returns the text of each span.
func spanStrings(s string, spans []span) []string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = s[sp.start:sp.end]
	}
	return out
}

// spanKinds returns the distinct kinds of spans in the given order.
func spanKinds(spans []span, order []string) []string {
	out := []string{}
	for _, k := range order {
		for _, sp := range spans {
			if sp.kind == k {
				out = append(out, k)
				break
			}
		}
	}
	return out
}
