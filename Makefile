.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

dev: ## run the whole stack in one process (harvest dev)
	go run ./cmd/harvest dev

test: ## run the test suite with -race (starts its own PostgreSQL and NATS)
	go test -race -p 1 -count=1 ./...

chaos: ## the fault-injection suite at length: 200 trials per fault kind, report in chaos-report.md
	go test ./e2e -run '^TestChaos$$' -count=1 -timeout 0 -chaos.trials 200 -chaos.report chaos-report.md

chaos-cluster: ## the same on a 3-node NATS cluster with nats_replicas 3, report in chaos-cluster-report.md
	go test ./e2e -run '^TestChaosCluster$$' -count=1 -timeout 0 -chaos.kinds all -chaos.trials 200 -chaos.report chaos-cluster-report.md

lint: ## gofmt, go vet, golangci-lint (.golangci.yml; .ci/run installs it) and go mod tidy must leave no diff
	@test -z "$$(gofmt -l .)" || (gofmt -l .; exit 1)
	go vet ./...
	golangci-lint run ./...
	go mod tidy -diff

build: ## build the four binaries into ./bin
	go build -o bin/ ./cmd/...

.PHONY: help dev test chaos chaos-cluster lint build
