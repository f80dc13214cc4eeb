package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Number is a decimal number kept exactly as written. The Kubernetes API avoids
// floating-point fields because they do not round-trip across languages; a Number is
// a JSON number on the wire and a string in Go, converted only where it is used.
//
// +kubebuilder:validation:Type=number
type Number string

// MarshalJSON writes the number as a JSON number.
func (n Number) MarshalJSON() ([]byte, error) {
	if n == "" {
		return []byte("0"), nil
	}
	if _, err := n.Float64(); err != nil {
		return nil, err
	}
	return []byte(n), nil
}

// UnmarshalJSON accepts a JSON number, or a string holding one (YAML users quote
// numbers now and then).
func (n *Number) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	v := Number(b)
	if _, err := v.Float64(); err != nil {
		return err
	}
	*n = v
	return nil
}

// Float64 parses the number.
func (n Number) Float64() (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", string(n))
	}
	return f, nil
}
