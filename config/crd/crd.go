// Package crd holds the generated CustomResourceDefinitions (bases/, written
// by make manifests), embedded so that a local run validates an Evaluation
// with the very schema and CEL rules the API server admits it by.
package crd

import "embed"

// Bases are the CRDs of bases/, one YAML file per kind.
//
//go:embed bases/*.yaml
var Bases embed.FS
