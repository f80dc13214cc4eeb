package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// valueDecoder decodes complete JSON texts held in memory (a jsonl line, a json
// array element, an inline item) with numbers kept as json.Number, so ids and
// large integers survive exactly.
type valueDecoder struct {
	rd bytes.Reader // reused across records
}

// decode decodes data, which must hold exactly one JSON value. after names what
// the value is in error messages about trailing data ("top-level value" or
// "array element"). On a syntax error off is the 0-based offset in data of the
// byte at fault.
func (d *valueDecoder) decode(data []byte, after string) (v any, off int, err error) {
	d.rd.Reset(data)
	dec := json.NewDecoder(&d.rd)
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			// Offset counts the bytes read up to and including the bad one.
			return nil, max(int(se.Offset)-1, 0), err
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, len(data), errEndOfInput
		default:
			return nil, 0, err
		}
	}
	// The decoder stops at the end of the first value; anything after it but
	// white space makes the text malformed, as it would for json.Unmarshal.
	end := int(dec.InputOffset())
	for i := end; i < len(data); i++ {
		if c := data[i]; !isJSONSpace(c) {
			return nil, i, fmt.Errorf("invalid character %s after %s", quoteChar(c), after)
		}
	}
	return v, 0, nil
}

// decodeObject decodes data as a JSON object; the error reads well after
// "line 17: " or "item 3: ".
func (d *valueDecoder) decodeObject(data []byte) (map[string]any, error) {
	v, _, err := d.decode(data, "top-level value")
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, ErrNotObject
	}
	return obj, nil
}

func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// quoteChar formats c as encoding/json does in its syntax errors, so that our
// messages read like the decoder's.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(c))
	return "'" + s[1:len(s)-1] + "'"
}

// compactJSON encodes a decoded value as compact JSON. HTML characters are kept
// as they are (json.Marshal would escape <, > and &), because the text is
// shown to models and people, not embedded in HTML. Objects come out with
// sorted keys, as encoding/json writes maps.
func compactJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Decoded JSON always encodes; this is for values built by hand.
		return fmt.Appendf(nil, "%v", v)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
