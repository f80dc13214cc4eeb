// Package score turns a model's answer into numbers between 0 and 1.
package score

import (
	"context"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Scorer types.
const (
	TypeExactMatch = "exact_match"
	TypeContains   = "contains"
	TypeRegex      = "regex"
	TypeNumeric    = "numeric"
	TypeJSONMatch  = "json_match"
	TypeToolCall   = "tool_call"
	TypeJudge      = "judge"
)

// Types lists every scorer type, in documentation order.
var Types = []string{TypeExactMatch, TypeContains, TypeRegex, TypeNumeric, TypeJSONMatch, TypeToolCall, TypeJudge}

// Normalizers, applied in the order given to both the answer and the expected text.
const (
	NormTrim               = "trim"
	NormLowercase          = "lowercase"
	NormCollapseWhitespace = "collapse_whitespace"
	NormStripPunctuation   = "strip_punctuation"
	// NormNumber writes a text that is a number as one: 42.0, +42 and 4.2e1
	// become 42, so that exact_match and contains compare numbers as
	// numbers. Other text is left as it is.
	NormNumber = "number"
)

// Normalizers lists every normalizer.
var Normalizers = []string{NormTrim, NormLowercase, NormCollapseWhitespace, NormStripPunctuation, NormNumber}

// Input is what a scorer sees of one sample.
type Input struct {
	// Output is the model's text answer.
	Output string
	// ToolCalls are the tools the model called.
	ToolCalls []provider.ToolCall
	// Expected is the sample's expected value as decoded from the dataset: a string,
	// json.Number, bool, map[string]any, []any, or nil.
	Expected    any
	HasExpected bool
	// Prompt is the rendered prompt (or the last user message of a chat sample).
	Prompt string
	// Input is the sample's mapped input field as text.
	Input string
	// Sample is the raw record.
	Sample map[string]any
	// Judge, when set, is the judge scorer's judge for this call instead of the
	// one it was built with: a scorer is built once, when the run is compiled,
	// and scored with the engine's judge, or with a stand-in while the run is
	// checked.
	Judge JudgeFunc
}

// Scorer scores one answer. Scores are in [0, 1]. An error means the sample could
// not be scored (no expected value, an unparseable judge verdict...); the engine
// records it as the sample's error.
type Scorer interface {
	Name() string
	Score(ctx context.Context, in Input) (float64, error)
}

// Config configures one scorer.
type Config struct {
	Type string
	// Name is the metric name; empty means Type.
	Name      string
	Normalize []string
	// Pattern is the regex scorer's RE2 pattern; empty means "use the expected value as the pattern".
	Pattern string
	// Tolerance is the numeric scorer's absolute tolerance.
	Tolerance float64
	// CheckArguments makes tool_call also require the expected arguments (a subset match).
	CheckArguments bool
	// Rubric is the judge's prompt template; empty means DefaultRubric.
	Rubric string
}

// JudgeFunc asks the judge model one question and returns its reply text. The engine
// provides it, so judge calls share the judge model's concurrency, limits, retries and cache.
type JudgeFunc func(ctx context.Context, prompt string) (string, error)
