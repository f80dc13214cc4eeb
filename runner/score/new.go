package score

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// ErrNoExpected is returned by scorers that compare against an expected value
// when the sample has none (HasExpected is false or Expected is nil).
var ErrNoExpected = errors.New("sample has no expected value")

// New builds the scorer cfg describes. All configuration is checked here, so that
// a typo in a pattern, normalizer or rubric fails the run before any model is
// called rather than erroring on every sample. judge is only needed (and only
// used) by the judge scorer. Scorers hold no mutable state, so one may score
// many samples concurrently.
func New(cfg Config, judge JudgeFunc) (Scorer, error) {
	if cfg.Type == "" {
		return nil, fmt.Errorf("missing scorer type (want one of %s)", strings.Join(Types, ", "))
	}
	norm, err := newNormalizer(cfg.Normalize)
	if err != nil {
		return nil, err
	}
	b := base{name: cmp.Or(cfg.Name, cfg.Type)}

	switch cfg.Type {
	case TypeExactMatch:
		return &exactMatch{base: b, norm: norm}, nil
	case TypeContains:
		return &contains{base: b, norm: norm}, nil
	case TypeRegex:
		s := &regexScorer{base: b, norm: norm}
		if cfg.Pattern != "" {
			re, err := regexp.Compile(cfg.Pattern)
			if err != nil {
				return nil, fmt.Errorf("pattern: %w", err)
			}
			s.re = re
		}
		return s, nil
	case TypeNumeric:
		// NaN would silently fail every comparison, so it is as wrong as a negative value.
		if cfg.Tolerance < 0 || math.IsNaN(cfg.Tolerance) {
			return nil, fmt.Errorf("tolerance must be a non-negative number (got %v)", cfg.Tolerance)
		}
		return &numeric{base: b, tolerance: cfg.Tolerance}, nil
	case TypeJSONMatch:
		return &jsonMatch{base: b}, nil
	case TypeToolCall:
		return &toolCall{base: b, checkArgs: cfg.CheckArguments}, nil
	case TypeJudge:
		return newJudge(b, cfg.Rubric, judge)
	}
	return nil, fmt.Errorf("unknown scorer type %q (want one of %s)", cfg.Type, strings.Join(Types, ", "))
}

// base carries what every scorer shares.
type base struct{ name string }

func (b base) Name() string { return b.name }

// hasExpected reports whether the sample carries an expected value. An explicit
// null counts as none: there is nothing to compare against.
func hasExpected(in Input) bool { return in.HasExpected && in.Expected != nil }

// exactMatch scores 1 when the normalized answer equals the normalized expected
// text (or any element of an expected array).
type exactMatch struct {
	base
	norm normalizer
}

func (s *exactMatch) Score(_ context.Context, in Input) (float64, error) {
	if !hasExpected(in) {
		return 0, ErrNoExpected
	}
	out := s.norm.apply(in.Output)
	return anyOf(in.Expected, func(want string) (bool, error) {
		return out == s.norm.apply(want), nil
	})
}

// contains scores 1 when the normalized answer contains the normalized expected
// text (or any element of an expected array).
type contains struct {
	base
	norm normalizer
}

func (s *contains) Score(_ context.Context, in Input) (float64, error) {
	if !hasExpected(in) {
		return 0, ErrNoExpected
	}
	out := s.norm.apply(in.Output)
	return anyOf(in.Expected, func(want string) (bool, error) {
		want = s.norm.apply(want)
		if want == "" {
			// Every answer contains "", so an empty expected value (often a blank
			// CSV cell) would silently score 1; treat it as a dataset error.
			return false, errors.New("expected value is empty (contains would match any answer)")
		}
		return strings.Contains(out, want), nil
	})
}

// regexScorer scores 1 when the normalized answer matches the configured pattern
// or, without one, the sample's expected value used as a pattern.
type regexScorer struct {
	base
	norm normalizer
	re   *regexp.Regexp // nil: the expected value is the pattern
}

func (s *regexScorer) Score(_ context.Context, in Input) (float64, error) {
	out := s.norm.apply(in.Output)
	if s.re != nil {
		return boolScore(s.re.MatchString(out)), nil
	}
	if !hasExpected(in) {
		return 0, ErrNoExpected
	}
	// The pattern is not normalized: lowercasing or stripping punctuation would
	// change its meaning (\D becomes \d, \. becomes a bare backslash...).
	return anyOf(in.Expected, func(pattern string) (bool, error) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return false, fmt.Errorf("expected pattern %q: %w", truncate(pattern, 80), err)
		}
		return re.MatchString(out), nil
	})
}

// anyOf calls match with the text form of expected or, when expected is an
// array, of each element in turn, and scores 1 at the first match. It allocates
// nothing for scalar expected values, which keeps the text scorers cheap.
func anyOf(expected any, match func(want string) (bool, error)) (float64, error) {
	list, ok := expected.([]any)
	if !ok {
		m, err := match(textForm(expected))
		return boolScore(m), err
	}
	if len(list) == 0 {
		// No acceptable answer at all is a dataset mistake, not a wrong answer.
		return 0, errors.New("expected value is an empty array")
	}
	for _, e := range list {
		m, err := match(textForm(e))
		if err != nil || m {
			return boolScore(m), err
		}
	}
	return 0, nil
}

func boolScore(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// truncate shortens s to at most n runes, for quoting model or dataset text in errors.
func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
