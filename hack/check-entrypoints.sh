#!/usr/bin/env bash
# Checks that every entry point a user or CI starts from a fresh machine installs
# the host packages before the first step that needs them (issue: make demo once
# built the images before anything installed busybox-static). It reads what make
# would run (make -n -B, nothing is executed) and fails if a step that needs host
# packages comes before hack/install-host-deps.sh with a group that covers it.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
# target -> the steps that need host packages, and the group that covers each.
check() {
	local target=$1 plan line n=0 have=""
	plan=$(make -n -B --no-print-directory "$target" 2>&1) || {
		echo "check-entrypoints: make -n $target failed:" >&2
		echo "$plan" >&2
		fail=1
		return
	}
	while IFS= read -r line; do
		n=$((n + 1))
		case $line in
		*hack/install-host-deps.sh\ cluster* | *hack/install-host-deps.sh) have=cluster ;;
		*hack/install-host-deps.sh\ images*) [ "$have" = cluster ] || have=images ;;
		*hack/build-images.sh*)
			[ -n "$have" ] || { echo "check-entrypoints: make $target builds images (step $n) before installing their host packages" >&2; fail=1; return; } ;;
		*./test/e2e/local/*)
			[ -n "$have" ] || { echo "check-entrypoints: make $target runs the local e2e tests (step $n) before installing PostgreSQL" >&2; fail=1; return; } ;;
		*hack/cluster-up.sh* | *hack/demo.sh* | *hack/e2e.sh*)
			[ "$have" = cluster ] || { echo "check-entrypoints: make $target starts the cluster (step $n) before installing its host packages" >&2; fail=1; return; } ;;
		esac
	done <<<"$plan"
}
for target in images cluster-up demo e2e test test-e2e-local; do
	check "$target"
done
# The scripts users may call directly install what they need themselves.
grep -q 'install-host-deps.sh" images' hack/build-images.sh ||
	{ echo "check-entrypoints: hack/build-images.sh does not install its host packages" >&2; fail=1; }
awk '/install-host-deps.sh/ {deps = NR} /build-images.sh"/ && !/^#/ {if (!deps) bad = 1} END {exit bad || !deps}' hack/cluster-up.sh ||
	{ echo "check-entrypoints: hack/cluster-up.sh builds images before installing host packages" >&2; fail=1; }
exit $fail
