// Package evalfile reads an Evaluation manifest from a file, strictly: the same YAML
// a user would `kubectl apply`, with every unknown or misspelt field an error that
// names its path, and the spec defaulted and validated as admission would.
package evalfile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/admission"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/runner/ratelimit"
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

// File is what a file for proctor run holds: one Evaluation, and the
// ModelEndpoints its models call through (the same documents a cluster
// holds, so that a file moves between a laptop and a cluster unchanged).
type File struct {
	// Evaluation is defaulted and validated; models with endpointRef still
	// name their endpoint only (Resolve fills them in).
	Evaluation *v1alpha1.Evaluation
	// Endpoints are the file's ModelEndpoints, by name.
	Endpoints map[string]*v1alpha1.ModelEndpoint
	// Quotas are the file's ModelQuotas, by name: locally, a run has the whole
	// of a quota its endpoints name (there is no one to share it with).
	Quotas map[string]*v1alpha1.ModelQuota
}

// Load reads, decodes, defaults and validates the Evaluation in the file at
// path, and gives its models what their ModelEndpoints say (Resolve).
func Load(path string) (*v1alpha1.Evaluation, error) {
	f, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	return f.Evaluation, nil
}

// LoadFile reads, decodes, defaults and validates the file at path, and
// resolves its models' endpoints.
func LoadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return DecodeFile(path, data)
}

// Decode is DecodeFile's Evaluation; name is used in error messages.
func Decode(name string, data []byte) (*v1alpha1.Evaluation, error) {
	f, err := DecodeFile(name, data)
	if err != nil {
		return nil, err
	}
	return f.Evaluation, nil
}

// DecodeFile decodes, defaults and validates a file's documents: one
// Evaluation and any number of ModelEndpoints, in any order. Models with
// endpointRef are given what their endpoint says (v1alpha1.Model.UseEndpoint).
// name is used in error messages.
func DecodeFile(name string, data []byte) (*File, error) {
	fail := func(problems ...string) error { return &Error{File: name, Problems: problems} }

	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fail(err.Error())
	}
	if len(docs) == 0 {
		return nil, fail("no Evaluation in the file")
	}
	f := &File{Endpoints: map[string]*v1alpha1.ModelEndpoint{}, Quotas: map[string]*v1alpha1.ModelQuota{}}
	var problems []string
	for i, doc := range docs {
		// With several documents, each problem says which one.
		where := ""
		if len(docs) > 1 {
			where = fmt.Sprintf("document %d: ", i+1)
		}
		kind, js, probs := decodeHeader(doc)
		if len(probs) > 0 {
			problems = append(problems, prefix(where, probs)...)
			continue
		}
		switch kind {
		case "Evaluation":
			if f.Evaluation != nil {
				problems = append(problems, where+"a second Evaluation; a file for proctor run holds one Evaluation (and the ModelEndpoints it uses)")
				continue
			}
			ev, probs := decodeEvaluation(js)
			problems = append(problems, prefix(where, probs)...)
			problems = append(problems, prefix(where, inlineScalars(doc))...)
			f.Evaluation = ev
		case "ModelEndpoint":
			ep, probs := decodeEndpoint(js)
			problems = append(problems, prefix(where, probs)...)
			if ep == nil {
				continue
			}
			if _, dup := f.Endpoints[ep.Name]; dup {
				problems = append(problems, fmt.Sprintf("%smetadata.name: Duplicate value: %q: a second ModelEndpoint of that name", where, ep.Name))
				continue
			}
			f.Endpoints[ep.Name] = ep
		case "ModelQuota":
			q, probs := decodeQuota(js)
			problems = append(problems, prefix(where, probs)...)
			if q == nil {
				continue
			}
			if _, dup := f.Quotas[q.Name]; dup {
				problems = append(problems, fmt.Sprintf("%smetadata.name: Duplicate value: %q: a second ModelQuota of that name", where, q.Name))
				continue
			}
			f.Quotas[q.Name] = q
		}
	}
	if len(problems) > 0 {
		return nil, fail(problems...)
	}
	if f.Evaluation == nil {
		return nil, fail("no Evaluation in the file (it holds only ModelEndpoints)")
	}
	if errs := f.resolve(); len(errs) > 0 {
		return nil, fail(fieldProblems(errs)...)
	}
	return f, nil
}

func prefix(p string, problems []string) []string {
	if p == "" {
		return problems
	}
	out := make([]string, len(problems))
	for i, s := range problems {
		out[i] = p + s
	}
	return out
}

// decodeHeader reads a document's kind, refusing any but an Evaluation's or
// a ModelEndpoint's, and a status.
func decodeHeader(doc []byte) (string, []byte, []string) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return "", nil, yamlProblems(err)
	}
	var tm struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Status     json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		return "", nil, []string{"not a YAML mapping"}
	}
	if tm.APIVersion != v1alpha1.GroupVersion.String() || (tm.Kind != "Evaluation" && tm.Kind != "ModelEndpoint" && tm.Kind != "ModelQuota") {
		return "", nil, []string{fmt.Sprintf("apiVersion and kind must be %s and Evaluation, ModelEndpoint or ModelQuota (got %q and %q)",
			v1alpha1.GroupVersion.String(), tm.APIVersion, tm.Kind)}
	}
	if st := strings.TrimSpace(string(tm.Status)); st != "" && st != "null" && st != "{}" {
		return "", nil, []string{"status: set by Proctor, not by the file; remove it"}
	}
	return tm.Kind, js, nil
}

// decode decodes js, a document of the kind obj is, and checks it as
// kubectl apply would have the API server check it: every unknown or
// duplicate field (kubectl's strict field validation), then the kind's CRD
// schema and rules (internal/admission, validator v), then what only a
// local run can check (local, given the decoded object). A value of the
// wrong type is the schema's to report, in its words, as admission would.
func decode(js []byte, obj any, v func() (*admission.Validator, error), local func() field.ErrorList) []string {
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	problems := make([]string, 0, len(strict))
	for _, e := range strict {
		problems = append(problems, e.Error())
	}
	if errs := admit(v, js); len(errs) > 0 {
		return append(problems, fieldProblems(errs)...)
	}
	if err != nil {
		// The schema refuses a value of the wrong type before Go's decoder
		// sees it, so this is one the schema let through (none is known);
		// the decoder's error names the Go field.
		return append(problems, err.Error())
	}
	if len(problems) > 0 {
		return problems
	}
	return fieldProblems(local())
}

func decodeEvaluation(js []byte) (*v1alpha1.Evaluation, []string) {
	var ev v1alpha1.Evaluation
	if probs := decode(js, &ev, validators.evaluation, func() field.ErrorList {
		return append(validateName(ev.Name), v1alpha1.ValidateLocal(&ev.Spec)...)
	}); len(probs) > 0 {
		return nil, probs
	}
	// Validated as written, defaulted as the controller defaults what it reads.
	v1alpha1.SetDefaults(&ev.Spec)
	return &ev, nil
}

func decodeEndpoint(js []byte) (*v1alpha1.ModelEndpoint, []string) {
	var ep v1alpha1.ModelEndpoint
	if probs := decode(js, &ep, validators.endpoint, noLocalChecks); len(probs) > 0 {
		return nil, probs
	}
	return &ep, nil
}

func decodeQuota(js []byte) (*v1alpha1.ModelQuota, []string) {
	var q v1alpha1.ModelQuota
	if probs := decode(js, &q, validators.quota, noLocalChecks); len(probs) > 0 {
		return nil, probs
	}
	return &q, nil
}

func noLocalChecks() field.ErrorList { return nil }

// admit is what the API server would say of the object js, by v.
func admit(v func() (*admission.Validator, error), js []byte) field.ErrorList {
	val, err := v()
	if err != nil {
		// The CRDs are embedded in the binary and tested: this is a build's fault.
		return field.ErrorList{field.InternalError(nil, err)}
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return val.Validate(context.Background(), obj)
}

// validators are built once, on first use (compiling the CEL rules takes a
// moment a run should not pay for nothing). The CRD's rules that hold in a
// cluster only are left out: a local run may read its dataset and baseline
// from files, and runs an agent on this machine, without an image.
var validators = struct {
	evaluation, endpoint, quota func() (*admission.Validator, error)
}{
	evaluation: sync.OnceValues(func() (*admission.Validator, error) {
		return admission.New("Evaluation",
			admission.WithoutRule("spec.datasets.source.file", "file is for local runs"),
			admission.WithoutRule("spec.baseline.path", "baseline.path is for local runs"),
			admission.WithoutRule("spec.models.agent", "agent.image is needed in a cluster"))
	}),
	endpoint: sync.OnceValues(func() (*admission.Validator, error) { return admission.New("ModelEndpoint") }),
	quota:    sync.OnceValues(func() (*admission.Validator, error) { return admission.New("ModelQuota") }),
}

// resolve gives each model with endpointRef what its ModelEndpoint says, and
// checks that the endpoints agents call are there.
func (f *File) resolve() field.ErrorList {
	var errs field.ErrorList
	ev := f.Evaluation
	for _, c := range apiconv.EndpointCallers(&ev.Spec) {
		rp := field.NewPath(c.Path)
		if ns := c.Ref.Namespace; ns != "" && ns != ev.Namespace {
			errs = append(errs, field.Invalid(rp.Child("namespace"), ns,
				fmt.Sprintf("a ModelEndpoint of another namespace; an Evaluation may only use its own namespace's (%q)", ev.Namespace)))
			continue
		}
		ep := f.Endpoints[c.Ref.Name]
		if ep == nil {
			errs = append(errs, field.NotFound(rp.Child("name"), c.Ref.Name))
			continue
		}
		if q := ep.Spec.QuotaRef; q != nil && f.Quotas[q.Name] == nil {
			errs = append(errs, field.NotFound(field.NewPath("ModelEndpoint "+ep.Name, "spec", "quotaRef", "name"), q.Name))
			continue
		}
		if c.Agent == nil {
			c.Model.UseEndpoint(&ep.Spec)
		}
	}
	return errs
}

// ModelEndpoints are the specs of the file's ModelEndpoints, by name (for
// the agents' proxies: compile.Env.ModelEndpoints).
func (f *File) ModelEndpoints() map[string]*v1alpha1.ModelEndpointSpec {
	out := map[string]*v1alpha1.ModelEndpointSpec{}
	for name, ep := range f.Endpoints {
		out[name] = &ep.Spec
	}
	return out
}

// EndpointLimits are the limits of the endpoints the Evaluation's models call
// through, by name (for the engine: runner.Plan.Endpoints): each endpoint's
// own, within its ModelQuota's.
func (f *File) EndpointLimits() map[string]ratelimit.Limits {
	out := map[string]ratelimit.Limits{}
	for _, name := range f.Evaluation.Spec.EndpointNames() {
		ep := f.Endpoints[name]
		if ep == nil {
			continue
		}
		var l ratelimit.Limits
		if ep.Spec.Limits != nil {
			l = apiconv.EndpointLimitsOf(*ep.Spec.Limits)
		}
		if ref := ep.Spec.QuotaRef; ref != nil && f.Quotas[ref.Name] != nil {
			l = l.Lesser(apiconv.EndpointLimitsOf(f.Quotas[ref.Name].Spec.Limits))
		}
		if !l.IsZero() {
			out[name] = l
		}
	}
	return out
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

// fieldProblems renders validation errors one per line. A rule of the
// object as a whole names no field (the API server says "<nil>: Invalid
// value: ..."): its message alone says it.
func fieldProblems(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
		if (e.Field == "" || e.Field == "<nil>") && e.Detail != "" {
			out[i] = e.Detail
		}
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
