# Proctor: the manager and the runner are one static binary.
#
# hack/build-images.sh (make images) builds the same image without Docker, as
# a tarball for `ctr images import`. Keep the two in step: build flags, the
# binary at /proctor, entrypoint, user, working directory and labels.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/proctor-dev/proctor/internal/version.Version=${VERSION}" \
      -o /out/proctor .

# distroless/static:nonroot has what hack/image's skeleton adds: CA
# certificates, /etc/passwd with nonroot (65532), /tmp, and /home/nonroot as
# the working directory.
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="proctor" \
      org.opencontainers.image.source="https://github.com/proctor-dev/proctor" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/proctor /proctor
USER 65532:65532
ENTRYPOINT ["/proctor"]
