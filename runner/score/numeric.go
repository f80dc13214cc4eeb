package score

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// numeric scores 1 when the last number in the answer is within tolerance of the
// expected number.
type numeric struct {
	base
	tolerance float64
}

func (s *numeric) Score(_ context.Context, in Input) (float64, error) {
	if !hasExpected(in) {
		return 0, ErrNoExpected
	}
	want, err := expectedNumber(in.Expected)
	if err != nil {
		return 0, err
	}
	got, ok := lastNumber(in.Output)
	if !ok {
		// The model gave no number: a wrong answer, not a scoring failure.
		return 0, nil
	}
	// The relative slack absorbs float noise such as 0.1+0.2 against 0.3.
	return boolScore(math.Abs(got-want) <= s.tolerance+1e-9*math.Max(1, math.Abs(want))), nil
}

// expectedNumber reads the expected value as a number: a JSON number, or a
// string (CSV cells are strings) holding one, read like an answer.
func expectedNumber(v any) (float64, error) {
	switch v := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return 0, fmt.Errorf("expected value %s is not a number", v)
		}
		return f, nil
	case string:
		f, ok := lastNumber(v)
		if !ok {
			return 0, fmt.Errorf("expected value %q has no number", truncate(v, 80))
		}
		return f, nil
	case float64:
		return v, nil
	case int:
		return float64(v), nil
	case int64:
		return float64(v), nil
	}
	return 0, fmt.Errorf("expected value must be a number or a string holding one (got %s)", textForm(v))
}

// numberRE finds number-like tokens: an optional minus sign (ASCII or U+2212) and
// dollar sign in either order, digits with optional comma thousands separators,
// an optional fraction ("3." included), and an optional exponent; or a bare
// fraction such as ".5". A trailing "%" is simply not part of the match.
var numberRE = regexp.MustCompile(
	`(?:[-−]\$?|\$[-−]?)?` +
		`(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)` +
		`(?:[eE][-+]?\d+)?`)

// lastNumber returns the last number in s. Models usually reason first and give
// their final answer last, so the last number is the best guess at the answer.
func lastNumber(s string) (float64, bool) {
	locs := numberRE.FindAllStringIndex(s, -1)
	for i := len(locs) - 1; i >= 0; i-- {
		start, end := locs[i][0], locs[i][1]
		if f, ok := parseNumber(s[start:end], precededByWord(s, start)); ok {
			return f, true
		}
	}
	return 0, false
}

// precededByWord reports whether the text just before start is a letter or digit:
// then a leading "-" is a hyphen ("10-20", "COVID-19"), not a minus sign.
func precededByWord(s string, start int) bool {
	r, size := utf8.DecodeLastRuneInString(s[:start])
	return size > 0 && (unicode.IsLetter(r) || unicode.IsDigit(r))
}

// parseNumber converts a numberRE match to a float.
func parseNumber(tok string, hyphen bool) (float64, bool) {
	neg := false
	if rest, ok := strings.CutPrefix(tok, "$"); ok {
		tok = rest
	}
	for _, minus := range []string{"-", "−"} {
		if rest, ok := strings.CutPrefix(tok, minus); ok {
			tok, neg = rest, !hyphen
			break
		}
	}
	tok = strings.TrimPrefix(tok, "$")
	tok = strings.ReplaceAll(tok, ",", "")
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		// Only overflow ("1e999") gets here; such a token is not a usable answer.
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}
