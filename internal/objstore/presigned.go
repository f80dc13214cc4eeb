package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// ErrRefused is a presigned URL the store refused (403): it expired, or
// its signature no longer holds. The holder asks for a new one.
var ErrRefused = errors.New("the store refused the presigned URL (expired?)")

// PutURL writes data with a presigned PUT URL (PresignPut). Its errors never
// carry the URL, which is a credential.
func PutURL(ctx context.Context, c *http.Client, u string, data []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(data))
	if err != nil {
		return errors.New("a presigned URL that is not a URL")
	}
	req.ContentLength = int64(len(data))
	_, err = doURL(c, req)
	return err
}

// GetURL reads an object with a presigned GET URL (PresignGet); ErrNotFound
// if it is not there.
func GetURL(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, errors.New("a presigned URL that is not a URL")
	}
	return doURL(c, req)
}

func doURL(c *http.Client, req *http.Request) ([]byte, error) {
	where := req.URL.Host + req.URL.Path // without the query, which holds the signature
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, where, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	switch {
	case resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("%s %s: %w", req.Method, where, ErrRefused)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s %s: %w", req.Method, where, ErrNotFound)
	case resp.StatusCode/100 != 2:
		return nil, fmt.Errorf("%s %s: the store answered %s", req.Method, where, resp.Status)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", req.Method, where, err)
	}
	return body, nil
}
