package results

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Parts fingerprint, each on its own, what decides a pair's records: the
// model, the data and the prompt decide its answers; each scorer decides its
// metric. A checkpoint keeps them, so that a run refused for a change says
// which, and a change to the scoring alone keeps the answers (paid for) and
// scores them again.
type Parts struct {
	Model    string `json:"model"`
	Data     string `json:"data"`
	System   string `json:"system"`
	Template string `json:"template"`
	// Scorers are the scorers' fingerprints (their configuration and
	// judge's model), by metric name.
	Scorers map[string]string `json:"scorers"`
}

// partsChange is how a checkpoint's parts differ from a run's.
type partsChange struct {
	// answers describes what changed of what decides the answers.
	answers []string
	// scoring describes the scorers changed, added and removed.
	scoring []string
	// keep are the metrics whose scorer did not change: their scores stay.
	keep map[string]bool
}

// compareParts says what differs from was to now.
func compareParts(model, dataset string, was, now *Parts) partsChange {
	c := partsChange{keep: map[string]bool{}}
	if was.Model != now.Model {
		c.answers = append(c.answers, fmt.Sprintf("model %q (its provider, endpoint, model or parameters)", model))
	}
	if was.Data != now.Data {
		c.answers = append(c.answers, fmt.Sprintf("the data of dataset %q (its content, format or fields)", dataset))
	}
	if was.System != now.System {
		c.answers = append(c.answers, "the system prompt (spec.prompt.system)")
	}
	if was.Template != now.Template {
		c.answers = append(c.answers, "the prompt template (spec.prompt.template)")
	}
	for _, name := range slices.Sorted(maps.Keys(now.Scorers)) {
		old, ok := was.Scorers[name]
		switch {
		case !ok:
			c.scoring = append(c.scoring, fmt.Sprintf("scorer %s added", name))
		case old != now.Scorers[name]:
			c.scoring = append(c.scoring, fmt.Sprintf("scorer %s changed", name))
		default:
			c.keep[name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(was.Scorers)) {
		if _, ok := now.Scorers[name]; !ok {
			c.scoring = append(c.scoring, fmt.Sprintf("scorer %s removed", name))
		}
	}
	return c
}

// MismatchError is a checkpoint whose answers a run cannot use: what decides
// them changed. It wraps ErrMismatch.
type MismatchError struct {
	Path, Model, Dataset string
	// Changed describes what changed of what decides the answers; empty
	// when the checkpoint is too old to say. Scoring describes the scorers
	// changed too.
	Changed, Scoring []string
}

func (e *MismatchError) Error() string {
	if len(e.Changed) == 0 {
		return fmt.Sprintf("%s holds results of model %q on dataset %q from a different version of the evaluation "+
			"(the model, prompt, scoring or data changed; this checkpoint is older than those that say which)", e.Path, e.Model, e.Dataset)
	}
	also := ""
	if len(e.Scoring) > 0 {
		also = " (and " + strings.Join(e.Scoring, ", ") + ")"
	}
	return fmt.Sprintf("%s holds answers of model %q on dataset %q to different requests: %s changed since%s, so they cannot be reused",
		e.Path, e.Model, e.Dataset, strings.Join(e.Changed, ", "), also)
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// Rescoring says that a pair's answers are scored again, without calling
// its model: what changed of the scoring, and how many answers.
type Rescoring struct {
	Model, Dataset string
	// Changed describes the scorers changed, added and removed; empty when
	// scoring again was asked for (proctor score).
	Changed []string
	// Answers counts the answers to score again.
	Answers int
}
