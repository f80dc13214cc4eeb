package agent

import (
	"errors"
	"fmt"
	"strings"
)

// EnvVar is one variable of the environment an executor gives the agent.
type EnvVar struct {
	Name string `json:"name"`
	// Value is the variable's value, unless FromExecutor.
	Value string `json:"value,omitempty"`
	// FromExecutor takes the value from the executor's own environment (its
	// container's: the pod puts Secrets there), so that it never passes
	// through the runner. Unset there, the variable is left out.
	FromExecutor bool `json:"fromExecutor,omitempty"`
	// Required: Connect fails (an *EnvError) when the executor does not have
	// the variable. Only with FromExecutor.
	Required bool `json:"required,omitempty"`
	// Secret: the value, if at least 8 bytes long, is removed (with its
	// encodings) from the agent's output and errors before they leave the
	// executor. Only with FromExecutor.
	Secret bool `json:"secret,omitempty"`
	// Key: an API key. Surrounding white space is trimmed; it is required,
	// must hold no space or control character (CheckKey), and is removed from
	// the agent's output whatever its length. Only with FromExecutor.
	Key bool `json:"key,omitempty"`
}

// minSecret is the shortest passed-through value taken for a secret: shorter
// ones are ordinary words that redaction would cut out of answers.
const minSecret = 8

func checkEnvVars(vars []EnvVar) error {
	for _, v := range vars {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") {
			return fmt.Errorf("%q is not a variable name", v.Name)
		}
		if !v.FromExecutor && (v.Required || v.Secret || v.Key) {
			return fmt.Errorf("%s: only a variable from the executor can be required, secret or a key", v.Name)
		}
		if v.FromExecutor && v.Value != "" {
			return fmt.Errorf("%s: a variable from the executor has no value of its own", v.Name)
		}
	}
	return nil
}

// CheckKey refuses a key that cannot go into an HTTP header. Surrounding white
// space is removed before (a key read from a file with `$(cat key)`, `echo`
// into a file, or a Secret made with --from-file ends in a newline); a key
// with space or control characters inside would fail every call, so it fails
// now.
func CheckKey(key string) error {
	for i, c := range key {
		if c < 0x21 || c == 0x7f {
			return fmt.Errorf("holds a space or control character (%q at byte %d); an API key has none", c, i)
		}
	}
	return nil
}

// EnvError is a variable the agent needs that its executor does not have, or
// an API key it has that is not usable.
type EnvError struct {
	Name string
	// Missing: the variable is not set, or (a key) is empty.
	Missing bool
	// Invalid is CheckKey's error for a key.
	Invalid error
}

func (e *EnvError) Error() string {
	if e.Missing {
		return fmt.Sprintf("%s is not set in the agent's container", e.Name)
	}
	return fmt.Sprintf("%s %v", e.Name, e.Invalid)
}

// envStatus is what an executor says of one of its variables: never its value.
type envStatus struct {
	Name    string `json:"name"`
	Missing bool   `json:"missing,omitempty"`
	Invalid string `json:"invalid,omitempty"`
}

// inspect says whether the variables the agent requires are usable.
func inspect(vars []EnvVar, lookup func(string) (string, bool)) []envStatus {
	var out []envStatus
	for _, v := range vars {
		if !v.Required && !v.Key {
			continue
		}
		s := envStatus{Name: v.Name}
		val, ok := lookup(v.Name)
		if v.Key {
			val = strings.TrimSpace(val)
			ok = ok && val != ""
			if err := CheckKey(val); ok && err != nil {
				s.Invalid = err.Error()
			}
		}
		s.Missing = !ok
		out = append(out, s)
	}
	return out
}

// envError is the first problem of statuses, if any.
func envError(statuses []envStatus) error {
	for _, s := range statuses {
		switch {
		case s.Missing:
			return &EnvError{Name: s.Name, Missing: true}
		case s.Invalid != "":
			return &EnvError{Name: s.Name, Invalid: errors.New(s.Invalid)}
		}
	}
	return nil
}

// resolve builds the agent's exact environment from vars, taking the values
// FromExecutor from lookup, and returns the values to redact from what the
// agent prints.
func resolve(vars []EnvVar, lookup func(string) (string, bool)) (env, secrets []string) {
	for _, v := range vars {
		if !v.FromExecutor {
			env = append(env, v.Name+"="+v.Value)
			continue
		}
		val, ok := lookup(v.Name)
		if !ok {
			continue
		}
		if v.Key {
			val = strings.TrimSpace(val)
		}
		env = append(env, v.Name+"="+val)
		if (v.Key && val != "") || (v.Secret && len(val) >= minSecret) {
			secrets = append(secrets, val)
		}
	}
	return env, secrets
}
