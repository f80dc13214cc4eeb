#!/usr/bin/env bash
# The end-to-end tests on a real local cluster (make e2e): builds what is missing
# (binaries, images, Helm, the Kubernetes components), brings up the cluster of
# hack/cluster-up.sh, runs test/e2e/cluster, and tears the cluster down whatever
# happened. On failure the tests save objects, events and every pod's and
# component's logs under _artifacts/.
#
#   KEEP_CLUSTER=1 make e2e       # leave the cluster up afterwards
#   E2E_RUN=TestSamples make e2e  # only some tests (go test -run)
#   make bench-cluster            # the cluster benchmarks instead (E2E_BENCH, go test -bench)
#   make bench-cluster BENCH_COUNT=3  # each benchmark 3 times on one cluster (E2E_BENCH_COUNT)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CLUSTER_DIR=${CLUSTER_DIR:-$root/bin/cluster}
export ARTIFACTS=${ARTIFACTS:-$root/_artifacts/e2e-$(date +%Y%m%d-%H%M%S)}
# gotestsum runs the tests (below; not the benchmarks).
gotestsum=${GOTESTSUM:-$root/bin/gotestsum}
if [ -z "${E2E_BENCH:-}" ] && [ ! -x "$gotestsum" ]; then
	echo "e2e: $gotestsum is missing; make e2e installs it (GOTESTSUM=... to use another)" >&2
	exit 1
fi

# A cluster that was running already (with its images reloaded by up) is left running.
started_here=1
if [ -f "$CLUSTER_DIR/pids/kube-apiserver.pid" ] && kill -0 "$(cat "$CLUSTER_DIR/pids/kube-apiserver.pid")" 2>/dev/null; then
	started_here=0
fi
down() {
	if [ "$started_here" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
		hack/cluster-down.sh
	fi
}
trap down EXIT
start=$(date +%s.%N)
hack/cluster-up.sh >/dev/null
awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "Measured: hack/cluster-up.sh %.1fs\n", b - a}'
export KUBECONFIG=$CLUSTER_DIR/kubeconfig
# -parallel: the subtests that run side by side (t.Parallel) mostly wait for
# pods and rate limits; go test's default, GOMAXPROCS, would run two at a time.
# Not more than 6: with all 8 of TestRunsSideBySide at once, the node's 2 CPUs
# of requests ran out (a pod Unschedulable for Insufficient cpu). Not fewer
# than 5: TestSharedKeys's four wait for its quota test, which needs a place.
args=(-tags e2e -count=1 -parallel 6 -timeout "${E2E_TIMEOUT:-45m}" ${E2E_RUN:+-run "$E2E_RUN"})
if [ -n "${E2E_BENCH:-}" ]; then
	# go test itself: gotestsum takes a benchmark for a failed test.
	go test -v "${args[@]}" -bench "$E2E_BENCH" -benchtime 1x -count "${E2E_BENCH_COUNT:-1}" ./test/e2e/cluster/
else
	# gotestsum prints go test -v's output as it comes, then each failed
	# test's output again after the last test: tests run side by side, so a
	# failure's message is otherwise far from the end of the log (where CI's
	# excerpt is). The whole run, as go test -json, is kept in the artifacts.
	mkdir -p "$ARTIFACTS"
	"$gotestsum" --format standard-verbose --no-summary=skipped --jsonfile "$ARTIFACTS/go-test.json" -- "${args[@]}" ./test/e2e/cluster/
fi 2>&1 | grep --line-buffered -v -E '^=== (RUN|PAUSE|CONT)'
