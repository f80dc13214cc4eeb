// Package admission validates Proctor's objects as the API server admits
// them, without one: it runs the generated CRDs' OpenAPI schemas and CEL rules
// (config/crd) with the API server's own libraries (the approach of
// kubectl-validate), so that a local run (proctor run) refuses exactly what
// kubectl apply would, with the same messages. What a schema cannot check
// (files on disk, templates, references between objects) stays in Go, where
// the local loader reads those.
package admission

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/config/crd"
)

// Validator checks objects of one kind against its CRD's schema and rules.
type Validator struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// Option changes what a Validator built by New checks.
type Option func(*structuralschema.Structural) error

// WithoutRule drops the CEL rule whose message starts with message from the
// schema at path (property names from the root between dots; an array's items
// are stepped through): a rule that holds in a cluster only, such as that a
// dataset is not a local file, which a pod could not read. It is an error for
// the rule not to be there, so that a reworded rule cannot slip back in.
func WithoutRule(path, message string) Option {
	return func(s *structuralschema.Structural) error {
		return dropRule(s, strings.Split(path, "."), path, message)
	}
}

func dropRule(s *structuralschema.Structural, rest []string, path, message string) error {
	for s.Items != nil {
		s = s.Items
	}
	if len(rest) == 0 {
		for i, r := range s.XValidations {
			if strings.HasPrefix(r.Message, message) {
				s.XValidations = slices.Delete(slices.Clone(s.XValidations), i, i+1)
				return nil
			}
		}
		return fmt.Errorf("no rule at %s says %q", path, message)
	}
	// Properties holds values: change a copy and put it back.
	child, ok := s.Properties[rest[0]]
	if !ok {
		return fmt.Errorf("no property %s (on the way to %s)", rest[0], path)
	}
	if err := dropRule(&child, rest[1:], path, message); err != nil {
		return err
	}
	s.Properties[rest[0]] = child
	return nil
}

// New builds the Validator of kind from its embedded CRD.
func New(kind string, opts ...Option) (*Validator, error) {
	props, err := schemaOf(kind)
	if err != nil {
		return nil, err
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("the %s schema: %w", kind, err)
	}
	st, err := structuralschema.NewStructural(props)
	if err != nil {
		return nil, fmt.Errorf("the %s schema is not structural: %w", kind, err)
	}
	for _, o := range opts {
		if err := o(st); err != nil {
			return nil, fmt.Errorf("the %s schema: %w", kind, err)
		}
	}
	return &Validator{structural: st, schema: sv, cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}, nil
}

// schemaOf reads kind's CRD from config/crd and converts its one version's
// schema to the API server's internal form, as the server does when it serves
// the CRD.
func schemaOf(kind string) (*apiextensionsinternal.JSONSchemaProps, error) {
	crds, err := crdsByKind()
	if err != nil {
		return nil, err
	}
	c, ok := crds[kind]
	if !ok {
		return nil, fmt.Errorf("no CRD of kind %q in config/crd", kind)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Schema == nil {
		return nil, fmt.Errorf("the %s CRD must have one version with a schema", kind)
	}
	var internal apiextensionsinternal.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(c.Spec.Versions[0].Schema, &internal, nil); err != nil {
		return nil, fmt.Errorf("the %s CRD's schema: %w", kind, err)
	}
	return internal.OpenAPIV3Schema, nil
}

var crdsByKind = sync.OnceValues(func() (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := fs.ReadFile(crd.Bases, f)
		if err != nil {
			return nil, err
		}
		var c apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out[c.Spec.Names.Kind] = &c
	}
	return out, nil
})

// Validate defaults obj (an object as JSON decodes it, numbers as int64 or
// float64: k8s.io/apimachinery/pkg/util/json) from the schema, as the API
// server does before it validates, and returns what the server would refuse
// it for: the schema's types, formats, enums and bounds, its list types, then
// the CEL rules, which the server skips when the object already breaks the
// schema in a way that could make a rule fail to evaluate.
func (v *Validator) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	structuraldefaulting.Default(obj, v.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, v.schema)
	errs = append(errs, schemaobjectmeta.Validate(nil, obj, v.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	if v.cel == nil {
		return errs
	}
	if blocking(errs) {
		return errs
	}
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// blocking is the API server's rule (customresource strategy's
// hasBlockingErr): errors of these types leave the CEL rules unchecked. The
// server then adds a line saying "some validation rules were not checked";
// a local run leaves it out, as the errors before it are what to fix.
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}
