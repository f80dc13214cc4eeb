// Package evalfile reads an Evaluation manifest from a file, strictly: the same YAML
// a user would `kubectl apply`, with every unknown or misspelt field an error that
// names its path, and the spec defaulted and validated as admission would.
package evalfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// Error is a problem with an Evaluation file: one line per problem, each naming the
// file and the field.
type Error struct {
	File     string
	Problems []string
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		// A quoted value may hold a line break; keep one problem on one line.
		lines[i] = e.File + ": " + strings.ReplaceAll(p, "\n", `\n`)
	}
	return strings.Join(lines, "\n")
}

// Load reads, decodes, defaults and validates the Evaluation in the file at path.
func Load(path string) (*v1alpha1.Evaluation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Decode(path, data)
}

// Decode decodes, defaults and validates an Evaluation manifest; name is used in
// error messages.
func Decode(name string, data []byte) (*v1alpha1.Evaluation, error) {
	fail := func(problems ...string) error { return &Error{File: name, Problems: problems} }

	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fail(err.Error())
	}
	switch len(docs) {
	case 0:
		return nil, fail("no Evaluation in the file")
	case 1:
	default:
		return nil, fail(fmt.Sprintf("holds %d documents; a file for proctor run holds one Evaluation", len(docs)))
	}
	js, err := yaml.YAMLToJSONStrict(docs[0])
	if err != nil {
		return nil, fail(yamlProblems(err)...)
	}

	var tm struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Status     json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fail("not a YAML mapping")
	}
	if tm.APIVersion != v1alpha1.GroupVersion.String() || tm.Kind != "Evaluation" {
		return nil, fail(fmt.Sprintf("apiVersion and kind must be %s and Evaluation (got %q and %q)",
			v1alpha1.GroupVersion.String(), tm.APIVersion, tm.Kind))
	}

	var ev v1alpha1.Evaluation
	strict, err := kjson.UnmarshalStrict(js, &ev, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fail(describeDecodeError(js, err))
	}
	if len(strict) > 0 {
		problems := make([]string, len(strict))
		for i, e := range strict {
			problems[i] = e.Error()
		}
		return nil, fail(problems...)
	}
	if st := strings.TrimSpace(string(tm.Status)); st != "" && st != "null" && st != "{}" {
		return nil, fail("status: set by Proctor, not by the file; remove it")
	}

	v1alpha1.SetDefaults(&ev.Spec)
	errs := validateName(ev.Name)
	errs = append(errs, v1alpha1.ValidateSpec(&ev.Spec)...)
	if len(errs) > 0 {
		return nil, fail(fieldProblems(errs)...)
	}
	return &ev, nil
}

// validateName checks metadata.name as the API server would: proctor run makes
// it a directory (results/NAME), so a path ("../../x") must not get that far.
// An empty name is allowed locally; proctor run then uses the file's name.
func validateName(name string) field.ErrorList {
	if name == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, msg))
	}
	return errs
}

// yamlProblems turns a YAML error into one problem per line: the parser lists
// several (duplicate keys, say) on indented lines under one heading.
func yamlProblems(err error) []string {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	head, rest, multi := strings.Cut(msg, "\n")
	if !multi {
		return []string{msg}
	}
	head = strings.TrimSuffix(strings.TrimSpace(head), ":")
	var out []string
	for _, l := range strings.Split(rest, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, head+": "+l)
		}
	}
	return out
}

// fieldProblems renders validation errors one per line.
func fieldProblems(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

// splitDocuments returns the non-empty YAML documents of data.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

// stripComments drops comment-only lines, so a document of comments counts as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// describeDecodeError names the field a decoding error is about. The JSON decoder
// names fields for type mismatches but not for errors from a field's own decoder
// (a bad duration or number), so for those the document is walked to find the value
// that fails.
func describeDecodeError(js []byte, err error) string {
	var doc any
	if json.Unmarshal(js, &doc) == nil {
		if path, ferr := locate(doc, reflect.TypeOf(v1alpha1.Evaluation{}), ""); path != "" {
			err = ferr
			var te *json.UnmarshalTypeError
			if errors.As(ferr, &te) {
				return fmt.Sprintf("%s: must be %s, not a %s", path, kindName(te.Type), te.Value)
			}
			return fmt.Sprintf("%s: %v", path, err)
		}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%s: must be %s, not a %s", te.Field, kindName(te.Type), te.Value)
	}
	return err.Error()
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// locate finds the first value in doc that the Go type t (or a field of it) refuses
// to decode, returning its path, with list indices and map keys, and the error.
func locate(doc any, t reflect.Type, path string) (string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	decodes := func() error {
		b, _ := json.Marshal(doc)
		return json.Unmarshal(b, reflect.New(t).Interface())
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := decodes(); err != nil {
			return path, err
		}
		return "", nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return "", nil
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if strings.Contains(opts, "inline") || (f.Anonymous && name == "") {
				if p, err := locate(doc, f.Type, path); p != "" {
					return p, err
				}
				continue
			}
			if name == "" {
				name = f.Name
			}
			if v, ok := obj[name]; ok {
				if p, err := locate(v, f.Type, join(path, name)); p != "" {
					return p, err
				}
			}
		}
	case reflect.Slice:
		items, ok := doc.([]any)
		if !ok {
			return "", nil
		}
		for i, v := range items {
			if p, err := locate(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p, err
			}
		}
	case reflect.Map:
		obj, ok := doc.(map[string]any)
		if !ok {
			return "", nil
		}
		for k, v := range obj {
			if p, err := locate(v, t.Elem(), fmt.Sprintf("%s[%s]", path, k)); p != "" {
				return p, err
			}
		}
	default:
		if doc != nil {
			if err := decodes(); err != nil {
				return path, err
			}
		}
	}
	return "", nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
