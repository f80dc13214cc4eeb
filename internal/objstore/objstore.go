// Package objstore is Proctor's client of S3-compatible object stores (AWS
// S3, GCS's S3 API, SeaweedFS, MinIO, Ceph), where results outgrow etcd and
// outlive their Evaluation (issue 27): the runner/results/objects.Bucket
// that results locations are written and read through. It is the AWS SDK for Go v2, narrowed to
// what a results location needs: conditional creates (If-None-Match: *, so two
// writers cannot both commit one manifest), whole and ranged reads, listing
// and deleting, all under one bucket and prefix.
package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-dev/proctor/runner/results/objects"
)

// ErrExists and ErrNotFound are results locations' errors (Store
// implements objects.Bucket).
var (
	ErrExists   = objects.ErrExists
	ErrNotFound = objects.ErrNotFound
)

var _ objects.Bucket = (*Store)(nil)

// Location is a bucket and a prefix in it: s3://BUCKET/PREFIX.
type Location struct {
	Bucket string
	// Prefix has no leading or trailing slash; empty is the bucket's root.
	Prefix string
}

// IsURL says whether s names an object store location (s3://...) rather
// than a local directory.
func IsURL(s string) bool { return strings.HasPrefix(s, "s3://") }

// ParseURL reads s3://BUCKET[/PREFIX].
func ParseURL(s string) (Location, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "s3" {
		return Location{}, fmt.Errorf("%q is not an object store location: want s3://BUCKET/PREFIX", s)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Location{}, fmt.Errorf("%q is not an object store location: want s3://BUCKET/PREFIX, with no user, query or fragment", s)
	}
	p, err := CleanPrefix(u.Path)
	if err != nil {
		return Location{}, fmt.Errorf("%q: %w", s, err)
	}
	return Location{Bucket: u.Host, Prefix: p}, nil
}

// CleanPrefix trims a prefix's slashes and refuses "." and ".." segments,
// which stores treat as plain names but people read as paths.
func CleanPrefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("the prefix %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return p, nil
}

// Join is the location under l named by elems.
func (l Location) Join(elems ...string) Location {
	return Location{Bucket: l.Bucket, Prefix: strings.Trim(path.Join(append([]string{l.Prefix}, elems...)...), "/")}
}

// String is the location's s3:// URL.
func (l Location) String() string {
	if l.Prefix == "" {
		return "s3://" + l.Bucket
	}
	return "s3://" + l.Bucket + "/" + l.Prefix
}

// Options say how to reach a store. Empty fields come from the standard
// AWS environment (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, profiles), as the AWS CLI reads it.
type Options struct {
	// Endpoint is the store's URL (http://host:port); empty is AWS S3 or the
	// environment's endpoint.
	Endpoint string
	// Region defaults to the environment's, else us-east-1 (which most
	// S3-compatible stores accept).
	Region string
	// AccessKeyID and SecretAccessKey, when set, are the credentials.
	AccessKeyID, SecretAccessKey string
	// PathStyle addresses buckets as http://host/BUCKET rather than
	// http://BUCKET.host; it is on whenever an endpoint is set (by Endpoint
	// or the environment), as self-hosted stores need it.
	PathStyle bool
	// HTTPClient, when set, makes the requests.
	HTTPClient *http.Client
	// WholeBelow is the size under which ReaderAt reads an object whole
	// (default 64 MiB); larger ones are read by ranges.
	WholeBelow int64
}

// Store is a location of an S3-compatible store. It implements
// objects.Bucket.
type Store struct {
	c          *s3.Client
	loc        Location
	endpoint   string
	wholeBelow int64
}

// Open makes a client of loc's bucket. It makes no request.
func Open(ctx context.Context, loc Location, o Options) (*Store, error) {
	var opts []func(*config.LoadOptions) error
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" || o.SecretAccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	// The SDK's own log lines (a WARN on stderr when no credentials are
	// found, say) would interleave with our output; its errors say it all.
	opts = append(opts, config.WithLogger(logging.Nop{}))
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("object store %s: reading the AWS configuration: %w", loc, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	endpoint := o.Endpoint
	if endpoint == "" {
		endpoint = cmpOr(os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	}
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("object store endpoint %q is not an http:// or https:// URL", endpoint)
		}
	}
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle || endpoint != ""
		if o.HTTPClient != nil {
			so.HTTPClient = o.HTTPClient
		}
		// Checksums only where the operation requires them: several
		// S3-compatible stores refuse the SDK's default trailing checksums.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	whole := o.WholeBelow
	if whole <= 0 {
		whole = 64 << 20
	}
	return &Store{c: c, loc: loc, endpoint: endpoint, wholeBelow: whole}, nil
}

// OpenURL opens the store an s3:// URL names, configured by the environment.
func OpenURL(ctx context.Context, u string) (*Store, error) {
	loc, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return Open(ctx, loc, Options{})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Location is where the store is.
func (s *Store) Location() Location { return s.loc }

// Endpoint is the endpoint the store was opened with, if any.
func (s *Store) Endpoint() string { return s.endpoint }

// Sub is the store under prefix elems of this one.
func (s *Store) Sub(elems ...string) *Store {
	c := *s
	c.loc = s.loc.Join(elems...)
	return &c
}

func (s *Store) key(k string) string {
	if s.loc.Prefix == "" {
		return k
	}
	return s.loc.Prefix + "/" + k
}

// errorCode is an S3 error's code, and its HTTP status.
func errorCode(err error) (string, int) {
	var ae smithy.APIError
	code := ""
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re interface{ HTTPStatusCode() int }
	status := 0
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func (s *Store) wrap(op, key string, err error) error {
	code, status := errorCode(err)
	switch {
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound && code != "NoSuchBucket":
		return fmt.Errorf("%s %s: %w", op, s.loc.Join(key), ErrNotFound)
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return fmt.Errorf("%s %s: %w", op, s.loc.Join(key), ErrExists)
	}
	return fmt.Errorf("%s %s: %w", op, s.loc.Join(key), err)
}

// PutIfAbsent implements objects.Bucket with If-None-Match: *, which AWS S3 and
// most S3-compatible stores honour: of writers racing for one key, one
// succeeds and the others get 412.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	for attempt := 0; ; attempt++ {
		_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(key)), Body: bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))), IfNoneMatch: aws.String("*"),
		})
		if err == nil {
			return nil
		}
		// AWS answers 409 ConditionalRequestConflict to a conditional write
		// racing another for the same key: try again, to learn which won.
		if code, status := errorCode(err); (code == "ConditionalRequestConflict" || status == http.StatusConflict) && attempt < 5 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
			}
			continue
		}
		return s.wrap("writing", key, err)
	}
}

// Put implements objects.Bucket.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(key)), Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return s.wrap("writing", key, err)
	}
	return nil
}

// Get implements objects.Bucket.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		return nil, s.wrap("reading", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, s.wrap("reading", key, err)
	}
	return b, nil
}

// ReaderAt implements objects.Bucket: an object below Options.WholeBelow is read
// whole, at once (one request); a larger one by ranges, each checked
// against the object's ETag so a replaced object is not read half old.
func (s *Store) ReaderAt(ctx context.Context, key string) (io.ReaderAt, int64, error) {
	head, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		return nil, 0, s.wrap("reading", key, err)
	}
	size := aws.ToInt64(head.ContentLength)
	if size < s.wholeBelow {
		b, err := s.Get(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		return bytes.NewReader(b), int64(len(b)), nil
	}
	return &rangeReader{ctx: ctx, s: s, key: key, etag: aws.ToString(head.ETag), size: size}, size, nil
}

type rangeReader struct {
	ctx  context.Context
	s    *Store
	key  string
	etag string
	size int64
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), r.size) - 1
	out, err := r.s.c.GetObject(r.ctx, &s3.GetObjectInput{
		Bucket: aws.String(r.s.loc.Bucket), Key: aws.String(r.s.key(r.key)),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, end)), IfMatch: aws.String(r.etag),
	})
	if err != nil {
		return 0, r.s.wrap("reading", r.key, err)
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, p[:end-off+1])
	if err != nil {
		return n, r.s.wrap("reading", r.key, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// List implements objects.Bucket.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	base := s.key("")
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(s.loc.Bucket), Prefix: aws.String(s.key(prefix))})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrap("listing", prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, strings.TrimPrefix(aws.ToString(o.Key), base))
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Dirs lists the "directories" right under prefix (which ends in "/", or
// is empty): the names before the next slash.
func (s *Store) Dirs(ctx context.Context, prefix string) ([]string, error) {
	var dirs []string
	full := s.key(prefix)
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(s.loc.Bucket), Prefix: aws.String(full), Delimiter: aws.String("/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrap("listing", prefix, err)
		}
		for _, cp := range page.CommonPrefixes {
			dirs = append(dirs, strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), full), "/"))
		}
	}
	slices.Sort(dirs)
	return dirs, nil
}

// Delete implements objects.Bucket, a key a request, eight at a time:
// DeleteObjects needs a Content-MD5 or checksum that not every
// S3-compatible store accepts.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	errs := make([]error, len(keys))
	var g errgroup.Group
	g.SetLimit(8)
	for i, k := range keys {
		g.Go(func() error {
			if _, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(k))}); err != nil {
				if werr := s.wrap("deleting", k, err); !errors.Is(werr, ErrNotFound) {
					errs[i] = werr
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// CreateBucket creates the location's bucket if it does not exist.
func (s *Store) CreateBucket(ctx context.Context) error {
	_, err := s.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.loc.Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		return fmt.Errorf("creating bucket %s: %w", s.loc.Bucket, err)
	}
	return nil
}

// PresignPut is a URL that lets its holder write the object at key, and no
// other, until expires has passed: how a runner pod writes its records
// without the store's credentials. The URL is a bearer credential: keep it
// in Secrets, never in logs.
func (s *Store) PresignPut(ctx context.Context, key string, expires time.Duration) (string, error) {
	req, err := s3.NewPresignClient(s.c, s3.WithPresignExpires(expires)).PresignPutObject(ctx,
		&s3.PutObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		return "", fmt.Errorf("presigning a write of %s: %w", s.loc.Join(key), err)
	}
	return req.URL, nil
}

// PresignGet is a URL that lets its holder read the object at key until
// expires has passed.
func (s *Store) PresignGet(ctx context.Context, key string, expires time.Duration) (string, error) {
	req, err := s3.NewPresignClient(s.c, s3.WithPresignExpires(expires)).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		return "", fmt.Errorf("presigning a read of %s: %w", s.loc.Join(key), err)
	}
	return req.URL, nil
}
