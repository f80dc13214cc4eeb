package score

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// textForm is how an expected value reads as text: strings as they are,
// json.Number as its literal, bools as true/false, nil as "", and anything else
// (objects, arrays) as compact JSON.
func textForm(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return string(v)
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Expected answers are compared with model text, which writes "<" not "\u003c".
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// normalizer is a chain of text transformations applied in order.
type normalizer []func(string) string

var normalizerFuncs = map[string]func(string) string{
	NormTrim:               strings.TrimSpace,
	NormLowercase:          strings.ToLower,
	NormCollapseWhitespace: collapseWhitespace,
	NormStripPunctuation:   stripPunctuation,
	NormNumber:             canonicalNumber,
}

// canonicalNumber writes s, when it is a number (surrounding space allowed),
// in one form: an integer without a fraction or exponent (42.0 → 42, 1e3 →
// 1000), any other number as Go's shortest form (0.50 → 0.5). Text that is not
// a number, or one too large to be exact as a float, is left as it is.
func canonicalNumber(s string) string {
	t := strings.TrimSpace(s)
	if t == "" || strings.ContainsAny(t, "_xXpPnNiI") {
		return s // not digits: hex, underscores, NaN and Inf are not answers' numbers
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return s
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		if f == 0 {
			return "0" // -0 too
		}
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func newNormalizer(names []string) (normalizer, error) {
	var n normalizer
	for _, name := range names {
		f, ok := normalizerFuncs[name]
		if !ok {
			return nil, fmt.Errorf("unknown normalizer %q (want one of %s)", name, strings.Join(Normalizers, ", "))
		}
		n = append(n, f)
	}
	return n, nil
}

func (n normalizer) apply(s string) string {
	for _, f := range n {
		s = f(s)
	}
	return s
}

// Each normalizer returns its input unchanged (without allocating) when there is
// nothing to do, which is the common case for short, clean answers.

// collapseWhitespace turns runs of whitespace into one space and trims the ends.
func collapseWhitespace(s string) string {
	if isCollapsed(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for f := range strings.FieldsSeq(s) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}

// isCollapsed reports whether s has no leading or trailing whitespace and no
// whitespace other than single spaces.
func isCollapsed(s string) bool {
	prevSpace := true // at the start, a space would be leading
	for _, r := range s {
		if !unicode.IsSpace(r) {
			prevSpace = false
			continue
		}
		if r != ' ' || prevSpace {
			return false
		}
		prevSpace = true
	}
	return !prevSpace || s == ""
}

// stripPunctuation removes Unicode punctuation (categories P*); symbols such as
// $ or + are kept. strings.Map returns s itself when nothing is removed.
func stripPunctuation(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPunct(r) {
			return -1
		}
		return r
	}, s)
}
