package provider

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Redacted replaces a secret, or any of its encoded forms, in text Proctor writes.
const Redacted = "[REDACTED]"

// minEncodedSecret is the shortest secret whose encoded forms are redacted too.
// A shorter value's encodings are short strings that ordinary text holds by
// chance (a 3-byte value is 6 hex digits); the value itself is always redacted.
const minEncodedSecret = 8

// Redactor removes a fixed set of secrets from text: each secret as it is, and
// the cheap encodings an agent or a model might print it in (base64 standard
// and URL-safe, padded or not, also inside a longer base64 stream; hex in either
// case; URL query and path escaping; JSON string escaping; the reversed string).
//
// It is a last line of defence, not a boundary: whoever holds a key can print it
// in a form no redactor recognizes (split, wrapped, rot13, encrypted).
//
// Build one per set of secrets (NewRedactor) and reuse it: Redact makes one pass
// over the text whatever the number of forms, and allocates only when it finds
// one. A nil *Redactor removes nothing. It is safe for concurrent use.
type Redactor struct {
	// one marks the bytes that are a whole form (a one-byte secret).
	one [256]bool
	// two is a bitset of the first two bytes of the longer forms: most
	// positions of a text are ruled out by one bit test.
	two [1 << 16 / 64]uint64
	// byPrefix holds the longer forms by their first two bytes, longest first.
	byPrefix map[uint16][]string
	empty    bool
}

// NewRedactor prepares the forms of secrets (empty ones are ignored).
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{byPrefix: map[uint16][]string{}, empty: true}
	seen := map[string]bool{}
	for _, s := range secrets {
		for _, f := range secretForms(s) {
			if f == "" || seen[f] {
				continue
			}
			seen[f] = true
			r.empty = false
			if len(f) == 1 {
				r.one[f[0]] = true
				continue
			}
			k := prefix2(f, 0)
			r.two[k/64] |= 1 << (k % 64)
			r.byPrefix[k] = append(r.byPrefix[k], f)
		}
	}
	for _, fs := range r.byPrefix {
		// Longest first, so that a form containing another is removed whole.
		slices.SortFunc(fs, func(a, b string) int { return len(b) - len(a) })
	}
	return r
}

func prefix2(s string, i int) uint16 { return uint16(s[i])<<8 | uint16(s[i+1]) }

// Redact returns s with every occurrence of a secret's forms replaced by
// [REDACTED]. Occurrences that overlap (two secrets sharing characters, a form
// inside another) are replaced together, so no part of either is left.
func (r *Redactor) Redact(s string) string {
	if r == nil || r.empty {
		return s
	}
	var (
		b          strings.Builder
		written    int     // s[:written] is in b
		start, end = -1, 0 // the occurrence being extended
	)
	for i := 0; i < len(s); i++ {
		n := 0
		if i+1 < len(s) {
			if k := prefix2(s, i); r.two[k/64]&(1<<(k%64)) != 0 {
				for _, f := range r.byPrefix[k] {
					if strings.HasPrefix(s[i:], f) {
						n = len(f)
						break
					}
				}
			}
		}
		if n == 0 && r.one[s[i]] {
			n = 1
		}
		if n == 0 {
			continue
		}
		if start >= 0 && i < end {
			end = max(end, i+n)
			continue
		}
		if start >= 0 {
			written = flushRedacted(&b, s, written, start, end)
		}
		start, end = i, i+n
	}
	if start < 0 {
		return s
	}
	written = flushRedacted(&b, s, written, start, end)
	b.WriteString(s[written:])
	return b.String()
}

func flushRedacted(b *strings.Builder, s string, written, start, end int) int {
	if b.Len() == 0 {
		b.Grow(len(s))
	}
	b.WriteString(s[written:start])
	b.WriteString(Redacted)
	return end
}

// Redact replaces in s every occurrence of each non-empty secret, and of its
// encoded forms, with [REDACTED]. The Redactor of each set of secrets is kept
// (a provider passes the same key with every error), so callers need not hold
// one.
func Redact(s string, secrets ...string) string {
	if len(secrets) == 0 || s == "" {
		return s
	}
	return redactorFor(secrets).Redact(s)
}

// redactors are the Redactors Redact built, by their secrets. A process uses a
// few sets (one per model); the bound only guards against a caller that makes
// new ones forever.
var redactors struct {
	sync.Mutex
	m map[string]*Redactor
}

const maxCachedRedactors = 64

func redactorFor(secrets []string) *Redactor {
	var b strings.Builder
	for _, s := range secrets {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	key := b.String()
	redactors.Lock()
	defer redactors.Unlock()
	r := redactors.m[key]
	if r == nil {
		if redactors.m == nil || len(redactors.m) >= maxCachedRedactors {
			redactors.m = map[string]*Redactor{}
		}
		r = NewRedactor(secrets...)
		redactors.m[key] = r
	}
	return r
}

// secretForms is a secret and the encodings of it that Redactor removes.
func secretForms(secret string) []string {
	if secret == "" {
		return nil
	}
	forms := []string{secret}
	if len(secret) < minEncodedSecret {
		return forms
	}
	raw := []byte(secret)
	h := hex.EncodeToString(raw)
	forms = append(forms, reverse(secret), h, strings.ToUpper(h), url.QueryEscape(secret), url.PathEscape(secret))
	forms = append(forms, jsonForms(secret)...)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		forms = append(forms, enc.EncodeToString(raw))
		forms = append(forms, base64Middles(enc.WithPadding(base64.NoPadding), raw)...)
	}
	return forms
}

// base64Middles are the characters of a secret's base64 that do not depend on
// what surrounds it, for each of the 3 offsets (mod 3) it can start at in a
// longer stream: those characters are in the stream whatever comes before and
// after. At offset 0 and with nothing after, that is the unpadded encoding.
func base64Middles(enc *base64.Encoding, raw []byte) []string {
	var out []string
	for k := range 3 {
		n := k + len(raw)
		full := enc.EncodeToString(append(make([]byte, k), raw...))
		// A character is 6 bits: the first ones mix in the k bytes before, the
		// last one the byte after (unless the secret ends on a group boundary).
		from, to := (8*k+5)/6, 8*n/6
		out = append(out, full[from:to])
		if k == 0 {
			out = append(out, full) // alone: its last character has zero low bits
		}
	}
	return out
}

// jsonForms are secret as the inside of a JSON string, by Go's encoders (with
// and without HTML escaping) and by those that escape "/".
func jsonForms(secret string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(secret) != nil {
			continue
		}
		s := strings.TrimSuffix(b.String(), "\n")
		s = s[1 : len(s)-1]
		out = append(out, s, strings.ReplaceAll(s, "/", `\/`))
	}
	return out
}

// reverse reverses s by characters (by bytes when it is not UTF-8).
func reverse(s string) string {
	if !utf8.ValidString(s) {
		b := []byte(s)
		slices.Reverse(b)
		return string(b)
	}
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}
