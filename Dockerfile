# Builds the four Harvest binaries; docker-compose.yml picks one per service.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/...

FROM debian:bookworm-slim
# curl answers the compose health checks (GET /readyz).
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 harvest
COPY --from=build /out/ /usr/local/bin/
COPY configs/ /etc/harvest/
USER harvest
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/harvest"]
