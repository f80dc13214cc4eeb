# Proctor: the manager and the runner are one static binary.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/proctor-dev/proctor/internal/version.Version=${VERSION}" \
      -o /out/proctor .

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/proctor /proctor
USER 65532:65532
ENTRYPOINT ["/proctor"]
