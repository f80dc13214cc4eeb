package provider

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		s       string
		secrets []string
		want    string
	}{
		{name: "no secrets", s: "key sk-1", want: "key sk-1"},
		{name: "empty secret ignored", s: "abc", secrets: []string{""}, want: "abc"},
		{name: "empty text", s: "", secrets: []string{"sk-123"}, want: ""},
		{name: "one occurrence", s: "bad key sk-123 given", secrets: []string{"sk-123"}, want: "bad key [REDACTED] given"},
		{name: "every occurrence", s: "sk-1/sk-1", secrets: []string{"sk-1"}, want: "[REDACTED]/[REDACTED]"},
		{name: "adjacent occurrences", s: "sk-1sk-1", secrets: []string{"sk-1"}, want: "[REDACTED][REDACTED]"},
		{name: "several secrets", s: "a=K1 b=K2", secrets: []string{"K1", "", "K2"}, want: "a=[REDACTED] b=[REDACTED]"},
		{name: "longer secret first", s: "token abcdef", secrets: []string{"abc", "abcdef"}, want: "token [REDACTED]"},
		{name: "absent", s: "nothing here", secrets: []string{"sk-9"}, want: "nothing here"},
		{name: "one-byte secret", s: "a-b-a", secrets: []string{"a"}, want: "[REDACTED]-b-[REDACTED]"},
		{name: "at the very end", s: "key=sk-123", secrets: []string{"sk-123"}, want: "key=[REDACTED]"},
		// A shorter secret that starts earlier must not leave most of a longer
		// one it overlaps: both go, as one.
		{name: "overlapping secrets", s: "<abcdefXXXXXXXXXXXX>", secrets: []string{"abcdef", "fXXXXXXXXXXXX"}, want: "<[REDACTED]>"},
		{name: "overlapping occurrences of one secret", s: "ababa", secrets: []string{"aba"}, want: "[REDACTED]"},
		// Encodings of short values would match ordinary text: only the value goes.
		{name: "short secret: no encodings", s: "abc 616263 cba YWJj", secrets: []string{"abc"}, want: "[REDACTED] 616263 cba YWJj"},
		{name: "reversed", s: "yek: 9876543210-ks", secrets: []string{"sk-0123456789"}, want: "yek: [REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Redact(tt.s, tt.secrets...)); diff != "" {
				t.Errorf("Redact(%q, %q) (-want +got):\n%s", tt.s, tt.secrets, diff)
			}
		})
	}
}

// Each cheap encoding of a key is removed, wherever it stands in the text.
func TestRedactEncodedForms(t *testing.T) {
	// Characters that every encoding treats differently: '/' and '+' (base64,
	// URL, JSON's "\/"), '&' and '<' (HTML-safe JSON, URL), '"' and '\\' (JSON),
	// a space-free non-ASCII letter.
	const key = `sk-ant-api03-Zx9/+q&<"\é_~.K7`
	raw := []byte(key)
	jsonOf := func(s string, html bool) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		return strings.Trim(strings.TrimSpace(b.String()), `"`) // the inside of the string
	}
	runes := []rune(key)
	for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
		runes[i], runes[j] = runes[j], runes[i]
	}
	tests := []struct {
		name, form string
	}{
		{"plain", key},
		{"reversed", string(runes)},
		{"hex", hex.EncodeToString(raw)},
		{"HEX", strings.ToUpper(hex.EncodeToString(raw))},
		{"query escaped", url.QueryEscape(key)},
		{"path escaped", url.PathEscape(key)},
		{"JSON string", jsonOf(key, true)},
		{"JSON string, no HTML escaping", jsonOf(key, false)},
		{`JSON string, "/" escaped`, strings.ReplaceAll(jsonOf(key, false), "/", `\/`)},
		{"base64", base64.StdEncoding.EncodeToString(raw)},
		{"base64 unpadded", base64.RawStdEncoding.EncodeToString(raw)},
		{"base64url", base64.URLEncoding.EncodeToString(raw)},
		{"base64url unpadded", base64.RawURLEncoding.EncodeToString(raw)},
		{"base64 of the key and a newline (echo | base64)", base64.StdEncoding.EncodeToString(append(raw, '\n'))},
		{"hex of the key and a newline (echo | xxd -p)", hex.EncodeToString(append(raw, '\n'))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := "before " + tt.form + " after"
			got := Redact(text, "unrelated-value", key)
			// What is left of the form, beside [REDACTED], is at most the
			// encoding of the newline (and its padding).
			if !strings.HasPrefix(got, "before [REDACTED]") || !strings.HasSuffix(got, " after") || len(got) > len("before [REDACTED] after")+4 {
				t.Errorf("Redact(%q) = %q: the encoded key is not removed", text, got)
			}
		})
	}
}

// A key inside a longer base64 stream starts at any of 3 offsets in its group of
// 3 bytes; each offset encodes it differently, and all of them are caught.
func TestRedactBase64Stream(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{8, 9, 10, 11, 40, 51, 108} {
		key := make([]byte, n)
		for i := range key {
			key[i] = byte('!' + rng.IntN(94))
		}
		red := NewRedactor(string(key))
		for before := range 7 {
			for after := range 4 {
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
					stream := make([]byte, 0, before+n+after)
					for range before {
						stream = append(stream, byte(rng.IntN(256)))
					}
					stream = append(stream, key...)
					for range after {
						stream = append(stream, byte(rng.IntN(256)))
					}
					text := enc.EncodeToString(stream)
					got := red.Redact(text)
					// Left around [REDACTED]: the characters that also encode the
					// bytes before and after (one mixed character on each side at
					// most), and padding.
					limit := (8*before+5)/6 + (8*after+5)/6 + 2 + 2
					if !strings.Contains(got, Redacted) || len(got)-len(Redacted) > limit {
						t.Errorf("key of %d bytes after %d bytes and before %d: %q became %q (want at most %d characters besides [REDACTED])",
							n, before, after, text, got, limit)
					}
				}
			}
		}
	}
}

// A Redactor is built once and used from many goroutines.
func TestRedactorShared(t *testing.T) {
	red := NewRedactor("sk-shared-0123456789")
	done := make(chan string)
	for i := range 8 {
		go func() { done <- red.Redact(fmt.Sprintf("%d: sk-shared-0123456789", i)) }()
	}
	for range 8 {
		if got := <-done; !strings.HasSuffix(got, ": [REDACTED]") {
			t.Errorf("concurrent Redact = %q", got)
		}
	}
	var none *Redactor
	if got := none.Redact("sk-shared-0123456789"); got != "sk-shared-0123456789" {
		t.Errorf("a nil Redactor changed the text: %q", got)
	}
}

// benchmarkText is 256 KiB of model output: prose, code and a base64 blob.
func benchmarkText() string {
	var b strings.Builder
	rng := rand.New(rand.NewPCG(3, 4))
	blob := make([]byte, 3<<10)
	for b.Len() < 256<<10 {
		b.WriteString("The task asks for a function that skips the first n samples of a stream; ")
		b.WriteString("func skip(r Reader, n int) error { for range n { if _, err := r.Next(); err != nil { return err } } return nil }\n")
		for i := range blob {
			blob[i] = byte(rng.IntN(256))
		}
		b.WriteString(base64.StdEncoding.EncodeToString(blob[:rng.IntN(len(blob))]))
		b.WriteString("\n")
	}
	return b.String()[:256<<10]
}

var benchmarkSecrets = []string{
	"sk-proj-3kX9vQ2mL8nR4tY7wZ1aB5cD6eF0gH2jK4lM6nP8qR0sT2uV4",
	"sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEf",
	"ghp_16C7e42F292c6912E7710c838347Ae178B4a",
}

// BenchmarkRedact measures the per-record cost: a 256 KiB output with three
// secrets set, holding none of them, and holding each in some form.
func BenchmarkRedact(b *testing.B) {
	clean := benchmarkText()
	third := len(clean) / 3
	dirty := clean[:third] + benchmarkSecrets[0] + clean[third:2*third] +
		base64.StdEncoding.EncodeToString([]byte(benchmarkSecrets[1])) + clean[2*third:] +
		hex.EncodeToString([]byte(benchmarkSecrets[2]))
	red := NewRedactor(benchmarkSecrets...)
	for _, c := range []struct{ name, text string }{{"none", clean}, {"three", dirty}, {"short", "4"}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.text)))
			b.ReportAllocs()
			for b.Loop() {
				red.Redact(c.text)
			}
		})
	}
	// For comparison: what a strings.ReplaceAll per form costs.
	b.Run("none/replaceall", func(b *testing.B) {
		var forms []string
		for _, s := range benchmarkSecrets {
			forms = append(forms, secretForms(s)...)
		}
		b.SetBytes(int64(len(clean)))
		b.ReportAllocs()
		for b.Loop() {
			s := clean
			for _, f := range forms {
				s = strings.ReplaceAll(s, f, Redacted)
			}
		}
	})
}

// BenchmarkNewRedactor is the cost of preparing the forms of three secrets.
func BenchmarkNewRedactor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		NewRedactor(benchmarkSecrets...)
	}
}
