# One image holds every PicoMQ binary (the operator now; the broker and the
# CLI as they land). Build with `make docker-build IMG=...`.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY broker/ broker/
COPY cmd/ cmd/
COPY controllers/ controllers/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/...

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /
USER 65532:65532
ENTRYPOINT ["/manager"]
