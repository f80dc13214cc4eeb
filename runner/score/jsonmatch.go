package score

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// jsonMatch scores 1 when the JSON in the answer contains the expected JSON, by
// the Subset rule.
type jsonMatch struct{ base }

func (s *jsonMatch) Score(_ context.Context, in Input) (float64, error) {
	if !hasExpected(in) {
		return 0, ErrNoExpected
	}
	want := in.Expected
	if str, ok := want.(string); ok {
		// CSV datasets can only carry the expected JSON as text.
		v, err := decodeJSON(str)
		if err != nil {
			return 0, fmt.Errorf("expected value %q is not valid JSON: %w", truncate(str, 80), err)
		}
		want = v
	}
	got, ok := extractJSON(in.Output)
	if !ok {
		return 0, nil
	}
	return boolScore(Subset(want, got)), nil
}

// decodeJSON decodes exactly one JSON value, keeping numbers as json.Number so
// that large integers survive.
func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

// maxJSONScan bounds the bytes extractJSON scans looking for a balanced value, so
// that pathological output ("[[[[..." without end) cannot cost quadratic time.
const maxJSONScan = 4 << 20

// extractJSON finds the JSON value in a model's answer: the whole answer, the
// body of a markdown code fence, or else the first balanced {...} or [...] in
// the prose that parses.
func extractJSON(s string) (any, bool) {
	s = strings.TrimSpace(s)
	if v, err := decodeJSON(s); err == nil {
		return v, true
	}
	if body, ok := fenceBody(s); ok {
		if v, err := decodeJSON(body); err == nil {
			return v, true
		}
	}
	budget := maxJSONScan
	for i := 0; i < len(s) && budget > 0; i++ {
		if s[i] != '{' && s[i] != '[' {
			continue
		}
		end, scanned := balancedEnd(s, i)
		budget -= scanned
		if end < 0 {
			continue
		}
		if v, err := decodeJSON(s[i:end]); err == nil {
			return v, true
		}
	}
	return nil, false
}

// fenceBody returns the text between the first ``` fence (after its info string,
// such as "json") and the next one.
func fenceBody(s string) (string, bool) {
	_, after, ok := strings.Cut(s, "```")
	if !ok {
		return "", false
	}
	nl := strings.IndexByte(after, '\n')
	if nl < 0 {
		return "", false
	}
	body, _, ok := strings.Cut(after[nl+1:], "```")
	return body, ok
}

// balancedEnd returns the end (exclusive) of the bracketed value starting at
// s[start], skipping brackets inside JSON strings, or -1 when the brackets do not
// balance. It also returns how many bytes it looked at.
func balancedEnd(s string, start int) (end, scanned int) {
	var stack []byte
	inString, escaped := false, false
	for i := start; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{':
			stack = append(stack, '}')
		case c == '[':
			stack = append(stack, ']')
		case c == '}' || c == ']':
			if stack[len(stack)-1] != c {
				return -1, i - start + 1
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return i + 1, i - start + 1
			}
		}
	}
	return -1, len(s) - start
}

// Subset reports whether actual contains expected: every key of an expected
// object must be in the actual object with a Subset value (extra actual keys are
// fine); arrays must have the same length and match element by element; numbers
// compare by value whatever their Go type (json.Number, float64, int); strings,
// bools and null compare equal.
func Subset(expected, actual any) bool {
	switch e := expected.(type) {
	case nil:
		return actual == nil
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return false
		}
		for k, ev := range e {
			av, ok := a[k]
			if !ok || !Subset(ev, av) {
				return false
			}
		}
		return true
	case []any:
		a, ok := actual.([]any)
		if !ok || len(a) != len(e) {
			return false
		}
		for i := range e {
			if !Subset(e[i], a[i]) {
				return false
			}
		}
		return true
	case string:
		a, ok := actual.(string)
		return ok && a == e
	case bool:
		a, ok := actual.(bool)
		return ok && a == e
	}
	if eq, ok := numbersEqual(expected, actual); ok {
		return eq
	}
	return reflect.DeepEqual(expected, actual)
}

// numbersEqual compares two numbers by value; ok is false unless both are numbers.
func numbersEqual(a, b any) (equal, ok bool) {
	af, aok := toFloat(a)
	bf, bok := toFloat(b)
	if !aok || !bok {
		return false, false
	}
	if af != bf {
		return false, true
	}
	// Integers beyond 2^53 round to the same float; when both sides are integer
	// literals (IDs, say) compare them exactly instead.
	an, aIsNum := a.(json.Number)
	bn, bIsNum := b.(json.Number)
	if aIsNum && bIsNum && isIntLiteral(string(an)) && isIntLiteral(string(bn)) && math.Abs(af) >= 1<<53 {
		return string(an) == string(bn), true
	}
	return true, true
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		// An overflowing literal still compares (as ±Inf) rather than as a non-number.
		return f, err == nil || errors.Is(err, strconv.ErrRange)
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	}
	return 0, false
}

// isIntLiteral reports whether a JSON number literal has no fraction or exponent.
func isIntLiteral(s string) bool { return !strings.ContainsAny(s, ".eE") }
