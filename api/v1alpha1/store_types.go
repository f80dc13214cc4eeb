package v1alpha1

// ResultsStore is an S3-compatible object store (AWS S3, GCS's S3 API,
// SeaweedFS, MinIO, Ceph) that holds an Evaluation's records instead of
// the cluster's results store. Its runs go under
// PREFIX/NAMESPACE/NAME/STARTED-RUN/, as in the cluster's.
type ResultsStore struct {
	// url is the location, s3://BUCKET or s3://BUCKET/PREFIX.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^?#]*)?$') && !self.substring(5).matches('//|/\\.\\.?(/|$)')`,message="resultsStore.url: want s3://BUCKET or s3://BUCKET/PREFIX (a bucket name of lowercase letters, digits, dots and dashes; no empty, . or .. prefix segment)"
	URL string `json:"url"`

	// endpoint is the store's URL, http(s)://host:port, for a store other
	// than AWS S3 (buckets are then addressed path-style). Empty: AWS S3.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^https?://[^/?#]+/?$`
	Endpoint string `json:"endpoint,omitempty"`

	// region of the store. Default us-east-1, which most S3-compatible
	// stores accept.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// credentialsSecret names a Secret of the Evaluation's namespace holding
	// the store's keys as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Only
	// the manager reads it: runner pods write through presigned URLs. It is
	// required: the manager never lends its own credentials to a store an
	// Evaluation names.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret"`
}
