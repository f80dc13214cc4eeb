#!/usr/bin/env bash
# Regenerates every generated file (make generate manifests, go mod tidy) and
# fails if that changed anything: generated files (deepcopy, CRDs, RBAC, the
# chart's copies, the API reference docs/reference/api.md, go.sum) must be committed as
# the generators make them.
#
# It compares the tree before and after, not with the last commit, so it also
# works on a tree with uncommitted edits (make test runs it); on CI's clean
# clone the two are the same.
set -euo pipefail
cd "$(dirname "$0")/.."

snapshot() {
	# (a file deleted but not yet staged is listed and cannot be read: skipped)
	{ git ls-files -z --cached --others --exclude-standard -- . ':(exclude)bin' |
		xargs -0 -r sha256sum 2>/dev/null || true; } | sort -k2
}

before=$(mktemp)
after=$(mktemp)
trap 'rm -f "$before" "$after"' EXIT
snapshot >"$before"
make --no-print-directory generate manifests >/dev/null
go mod tidy
snapshot >"$after"
if ! diff -u "$before" "$after" >/dev/null; then
	echo "Regenerating changed these files; run make generate manifests (and go mod tidy), then commit them:" >&2
	diff "$before" "$after" | awk '/^[<>]/ {print $3}' | sort -u | sed 's/^/  /' >&2
	exit 1
fi
echo "Generated files are up to date."
