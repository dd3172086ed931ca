.PHONY: test test-quick run bench build

# Every test, every backend required (installs PostgreSQL and Redis if missing).
test:
	./scripts/test.sh

# The quick loop: SQLite only, backends whose server is missing are skipped.
test-quick:
	go test ./...

run:
	go run ./cmd/node

# -buildvcs=auto stamps the commit (fq-node --version) even where GOFLAGS
# turns it off.
build:
	go build -buildvcs=auto -o bin/fq-node ./cmd/node
	go build -buildvcs=auto -o bin/fq ./cmd/fq

bench:
	go test -run '^$$' -bench . -benchtime 2s ./store/...
