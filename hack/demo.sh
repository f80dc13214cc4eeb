#!/usr/bin/env bash
# make demo: Proctor on a real single-node Kubernetes on this machine, from a
# fresh clone. Starts the local cluster (hack/cluster-up.sh) unless it runs,
# installs the Helm chart and the fake model server, applies a sample
# Evaluation, shows `kubectl get evaluations -w` until it ends, and prints its
# results. The cluster is left running for you; `make cluster-down` stops it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
CLUSTER_DIR=${CLUSTER_DIR:-$root/bin/cluster}
HELM=${HELM:-$root/bin/helm}
NS=${DEMO_NAMESPACE:-demo}
SAMPLE=config/samples/proctor_v1alpha1_evaluation_sliding_window.yaml
NAME=sliding-window
export KUBECONFIG=$CLUSTER_DIR/kubeconfig
kubectl() { "$root/bin/kube-$KUBE_VERSION/kubectl" "$@"; }
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Starting the local cluster (etcd, control plane, containerd, kubelet, kube-proxy; root needed)"
hack/cluster-up.sh >/dev/null   # when it runs already: reloads the images
kubectl get nodes

step "A results store: SeaweedFS's S3 gateway as Service seaweedfs.proctor-system.svc (config/seaweedfs)"
kubectl create namespace proctor-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -k config/seaweedfs
kubectl rollout status -n proctor-system deployment/seaweedfs --timeout=3m

step "helm install proctor charts/proctor, committing each run's records to that store"
"$HELM" upgrade --install proctor charts/proctor --namespace proctor-system --create-namespace --wait --timeout 3m \
	--set resultsStore.url=s3://proctor/runs \
	--set resultsStore.endpoint=http://seaweedfs.proctor-system.svc:8333 \
	--set resultsStore.credentialsSecret=results-s3 >/dev/null
kubectl get deployment -n proctor-system

step "The fake OpenAI/Anthropic-compatible server, as Service fakellm.proctor-system.svc"
kubectl apply -k config/fakellm
kubectl rollout status -n proctor-system deployment/fakellm --timeout=2m

step "kubectl apply -n $NS -f $SAMPLE"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# The sample reads its API key from this Secret; the fake server needs none,
# so any value works here.
kubectl create secret generic openai -n "$NS" --from-literal=api-key=not-a-real-key --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl delete evaluation "$NAME" -n "$NS" --ignore-not-found --wait=true >/dev/null
kubectl apply -n "$NS" -f "$SAMPLE"

step "kubectl get evaluations -n $NS -w   (24 samples, 2 shards sharing 300 requests/minute)"
# The binary itself, not the kubectl function: killing a function's subshell
# would leave its kubectl running.
"$root/bin/kube-$KUBE_VERSION/kubectl" get evaluations -n "$NS" -w &
watcher=$!
trap 'kill $watcher 2>/dev/null || true' EXIT
for _ in $(seq 600); do
	phase=$(kubectl get evaluation "$NAME" -n "$NS" -o jsonpath='{.status.phase}')
	case "$phase" in Succeeded | Failed) break ;; esac
	sleep 0.5
done
sleep 1
kill "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true

step "Results: status.results, and the records with proctor results"
kubectl get evaluation "$NAME" -n "$NS" -o jsonpath='{range .status.results[*]}model={.model} dataset={.dataset} completed={.completed}/{.total} errored={.errored} metrics={.metrics} p50={.latencyMillis.p50}ms{"\n"}{end}'
bin/proctor results "$NAME" -n "$NS" -o "results/$NAME"
head -n 3 "results/$NAME/results.jsonl"

step "The same records, committed to the results store (Parquet), read back from it"
location=$(kubectl get evaluation "$NAME" -n "$NS" -o jsonpath='{.status.resultsLocation}')
echo "status.resultsLocation: $location"
store_ip=$(kubectl get service seaweedfs -n proctor-system -o jsonpath='{.spec.clusterIP}')
AWS_ENDPOINT_URL_S3=http://$store_ip:8333 AWS_ACCESS_KEY_ID=proctor AWS_SECRET_ACCESS_KEY=local-results-store-secret-7c41e9 AWS_REGION=us-east-1 \
	bin/proctor results "$location" -o "results/$NAME-from-store" --overwrite
echo "$(wc -l <"results/$NAME-from-store/results.jsonl") records in results/$NAME-from-store/results.jsonl"

cat <<EOF

$(printf '\033[1m')The cluster is yours to explore:$(printf '\033[0m')
  export KUBECONFIG=$KUBECONFIG PATH=$root/bin/kube-$KUBE_VERSION:\$PATH
  kubectl get evaluations -A
  kubectl describe evaluation $NAME -n $NS
  kubectl get configmap $NAME-results -n $NS -o yaml
  export AWS_ENDPOINT_URL_S3=http://$store_ip:8333 AWS_ACCESS_KEY_ID=proctor AWS_SECRET_ACCESS_KEY=local-results-store-secret-7c41e9
  bin/proctor results $location -o out/from-store   # the run's records, from the results store
  kubectl create secret generic anthropic -n $NS --from-literal=api-key=any
  kubectl apply -n $NS -k config/samples/     # every sample; see their comments

$(printf '\033[1m')The same Evaluation against a real OpenAI-compatible endpoint:$(printf '\033[0m')
  kubectl create secret generic openai -n $NS --from-literal=api-key="\$OPENAI_API_KEY" --dry-run=client -o yaml | kubectl apply -f -
  cp $SAMPLE my-eval.yaml
  then in my-eval.yaml set the model's baseURL to your endpoint (e.g.
  https://api.openai.com/v1, or delete the line for OpenAI itself) and model to a
  real one (e.g. gpt-4.1-mini), and kubectl apply -n $NS -f my-eval.yaml: the
  changed spec starts a new run. The local cluster's DNS forwards outside names to this
  machine's resolver, so pods reach the endpoint if this machine does.

Stop the cluster and undo its host changes with: make cluster-down
EOF
