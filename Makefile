# awcp — see README.md.
GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/awcp/awcp/cmd/internal/clikit.Version=$(VERSION)

.PHONY: build test test-short test-portable cross release install-launchd unit e2e race bench bench-quick demo demo-acp lint clean install soak k8s-e2e

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/awcp-ctl ./cmd/awcp-fs

# Everything: unit tests with the race detector, the Kubernetes manifests
# against the API types (a module of its own), then the end-to-end suite
# against the built binaries; its timeout leaves room for a first run's
# npm installs of the real agents, 1.5 GB. The e2e tests that share
# nothing run E2E_PARALLEL at a time (parallel(t)), after those that must
# run alone (alone(t, why)); see docs/testing.md.
E2E_PARALLEL ?= 4
E2E = $(GO) test -count=1 -timeout 15m -parallel $(E2E_PARALLEL) ./test/e2e/...
test: build cross
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 10m $$($(GO) list ./... | grep -v /test/e2e)
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -count=1 ./...
	AWCP_BIN_DIR=$(BIN) $(E2E)

# The fleet on a real single-node Kubernetes (deploy/kubernetes/e2e, a
# module of its own): builds the cluster's components (kept in
# /var/cache/awcp-k8s: about 15 minutes the first time, seconds after),
# starts the cluster in a network namespace, applies deploy/kubernetes,
# delegates into it, and takes it all down. Linux, root.
k8s-e2e:
	deploy/kubernetes/e2e/cluster.sh test

# The portable twins on Linux: the programs built with the server's root
# walked a component at a time and by os.Root, and the polled watch with
# a directory trigger shaped as kqueue's (as macOS and FreeBSD run them,
# internal/portable), the server's unit tests
# and the whole end-to-end suite against them. CI runs it after make test.
# (LINUX_OWN: the tests of openat2 and of fanotify and inotify themselves,
# which make test runs.)
LINUX_OWN = TestBeneathConfines|TestWatchReportsOthersChanges/(fanotify|inotify)|TestWatchIsExact|TestWatchBoundedAgainstTheAgent|TestWatchWholeFileSystem
test-portable:
	$(GO) build -tags awcp_portable -ldflags '$(LDFLAGS)' -o $(BIN)/portable/ ./cmd/awcp-ctl ./cmd/awcp-fs
	$(GO) test -tags awcp_portable -count=1 ./sshd/... ./internal/treewalk/... \
		-skip '$(LINUX_OWN)'
	AWCP_BIN_DIR=$(BIN)/portable $(E2E)

# The loop while working: the unit tests without the race detector, and
# the end-to-end tests that take under a second each (the others call
# slow(t), which go test -short skips). make test runs everything.
test-short: build
	$(GO) test -short -count=1 $$($(GO) list ./... | grep -v /test/e2e)
	AWCP_BIN_DIR=$(BIN) $(GO) test -short -count=1 -timeout 5m -parallel $(E2E_PARALLEL) ./test/e2e/...

unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/e2e)

e2e: build
	AWCP_BIN_DIR=$(BIN) $(GO) test -count=1 -v -timeout 15m -parallel $(E2E_PARALLEL) ./test/e2e/...

# The chaos soak: an agent writes on the live mount (fio with crc32c, a
# journalled tree) while the delegator is frozen, killed and restarted and
# its connections reset, forward and reverse, then the executor is killed;
# everything is verified on the delegator's disk. `make test` runs it for
# 20 s a phase; this for 5 minutes (AWCP_SOAK=10m for longer).
AWCP_SOAK ?= 5m
soak: build
	AWCP_BIN_DIR=$(BIN) AWCP_SOAK=$(AWCP_SOAK) $(GO) test -count=1 -v -timeout 60m -run '^TestSoak$$' ./test/e2e/

# Micro-benchmarks (the watch's and the audit log's cost per request among
# them), the control plane's INVITE → running latency, the
# archive round trip of a 50 MB workspace, then the filesystem workloads on local disk, a go-fuse loopback, sshfs and an awcp
# mount, dbench's file-server load on the same four, then the live mount staged against auto,
# then a large tree (scale.sh: SCALE_DIRS, default 24000), then a build of a
# generated C project on local disk, the live mount and the git transport
# (build.sh), then the CPU each daemon spends per request against the
# commit before the last round's security work (ops.sh: BENCH_BASE), then
# an agent's work across a link that adds 2, 20, 100 and 200 ms round
# trips, then 20 ms with 1% of the packets lost and 20 ms capped at 20
# Mbit/s, on local disk, the live mount, the git transport and sshfs, with
# the delegation's two ends on the live mount and the git transport
# (latency.sh), and
# last one table of ratios to the loopback and sshfs (summary.sh; compare
# two runs with test/bench/summary.sh DIR_A DIR_B). Root.
BENCH_OUT ?= $(BIN)/bench
export BENCH_OUT
# The build measured, for summary.sh's table; a previous run's results go,
# or its table would mix them in (a bench-quick after a bench showed the
# bench's warm rounds and dbench).
BENCH_STAMP = mkdir -p $(BENCH_OUT) && rm -f $(BENCH_OUT)/*.tsv $(BENCH_OUT)/*.txt && \
	$(BIN)/awcp-ctl --version | awk '{ print $$NF }' >$(BENCH_OUT)/version
bench: build
	$(BENCH_STAMP)
	$(GO) test -run '^$$' -bench . -benchmem ./archive/ ./lease/ ./sshd/ ./control/...
	$(GO) test -run '^$$' -bench DelegatorChangeSeen ./fs/
	$(GO) test -run '^$$' -bench 'ListingsHeld|ChangeLogHeld' -benchtime 3x ./fs/
	$(GO) test -run '^$$' -bench WarmStoreHeld -benchtime 1x ./fs/
	$(GO) test -run '^$$' -bench PerRequestCost -benchtime 3000x ./fs/
	$(GO) test -run '^$$' -bench ConfinedWork -benchtime 10x ./internal/sandbox/
	$(GO) test -run '^$$' -bench AgentBuildCache -benchtime 2x ./internal/sandbox/
	$(GO) test -run '^$$' -bench AreaHeld -benchtime 1x ./internal/stage/
	$(GO) run ./test/bench/control -bin $(BIN) -n 100 -archive-mb 50 -archive-files 5000
	BIN=$(BIN) bash test/bench/fs.sh
	BIN=$(BIN) bash test/bench/staged.sh
	BIN=$(BIN) bash test/bench/scale.sh
	BIN=$(BIN) bash test/bench/build.sh
	BIN=$(BIN) bash test/bench/ops.sh
	BIN=$(BIN) bash test/bench/latency.sh
	bash test/bench/summary.sh $(BENCH_OUT)

# The same table from smaller runs (a few minutes): every Go benchmark
# once (one that no longer runs fails here); the filesystem
# workloads at a quarter of their size, 3 interleaved rounds, cold only,
# and one round on a staged and an auto delegation; the requests' CPU; a
# tree of 3,000 directories; the control plane's latency and delegations
# at once, each small; an agent's work across a 20 ms round trip on local
# disk, the live mount and the git transport (test/bench/control: it too
# had stopped running unseen; its archive round trip is left out, whose
# peak-memory target is a multiple of the workspace, meaningless for a
# small one). CI runs it on every change and prints the ratios; a goal
# missed fails nothing, a benchmark or workload that fails fails it.
bench-quick: build
	$(BENCH_STAMP)
	$(GO) test -run '^$$' -bench . -benchtime 1x ./archive/ ./lease/ ./sshd/ ./control/... ./fs/ ./internal/sandbox/ ./internal/stage/
	BIN=$(BIN) BENCH_ROUNDS=3 BENCH_WARM=0 BENCH_DBENCH=0 WORKLOADS_QUICK=1 bash test/bench/fs.sh
	BIN=$(BIN) BENCH_ROUNDS=1 WORKLOADS_QUICK=1 bash test/bench/staged.sh
	BIN=$(BIN) BENCH_BASE=none OPS_N=500 OPS_ROUNDS=3 bash test/bench/ops.sh
	BIN=$(BIN) SCALE_DIRS=3000 SCALE_WIDE=5000 bash test/bench/scale.sh
	$(GO) run ./test/bench/control -bin $(BIN) -n 10 -archive-mb 0 -flood-reads 0 -trickle-clients 0 -many 3 -attempts 3
	BIN=$(BIN) LAT_RTTS=20 LAT_TARGETS="local live git" bash test/bench/latency.sh
	bash test/bench/summary.sh $(BENCH_OUT)

demo: build
	BIN=$(BIN) sh test/e2e/demo/run.sh

demo-acp: build
	BIN=$(BIN) sh test/e2e/demo/acp.sh

# Every target, built and vetted (tests too), CGO off: awcp-ctl and every
# package it is made of for macOS and FreeBSD — the delegator where people
# work; built and vetted here, not run: no such machine is here — and
# both programs for Linux on arm64.
LAPTOPS = darwin/arm64 darwin/amd64 freebsd/amd64
cross:
	@set -e; pkgs=$$($(GO) list -deps ./cmd/awcp-ctl | grep '^github.com/awcp/awcp'); \
	for t in $(LAPTOPS); do \
		echo "awcp-ctl for $$t"; \
		GOOS=$${t%/*} GOARCH=$${t#*/} CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/awcp-ctl; \
		GOOS=$${t%/*} GOARCH=$${t#*/} CGO_ENABLED=0 $(GO) vet $$pkgs; \
	done; \
	echo "awcp-ctl and awcp-fs for linux/arm64"; \
	GOARCH=arm64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/awcp-ctl ./cmd/awcp-fs; \
	GOARCH=arm64 CGO_ENABLED=0 $(GO) vet $$($(GO) list ./... | grep -v /test/e2e)

# Static binaries for people to download: awcp-ctl for every target,
# awcp-fs (the executor: FUSE, namespaces, Landlock) for Linux alone,
# each named for its version and target, with SHA256SUMS beside them.
RELEASE = linux/amd64 linux/arm64 darwin/arm64 darwin/amd64 freebsd/amd64
release:
	@set -e; out=$(BIN)/release/$(VERSION); rm -rf $$out; mkdir -p $$out; \
	for t in $(RELEASE); do \
		os=$${t%/*}; arch=$${t#*/}; progs=awcp-ctl; [ $$os = linux ] && progs="awcp-ctl awcp-fs"; \
		for p in $$progs; do \
			GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' \
				-o $$out/$$p-$(VERSION)-$$os-$$arch ./cmd/$$p; \
		done; \
	done; \
	cd $$out && sha256sum awcp-* > SHA256SUMS && cat SHA256SUMS

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# The programs, the systemd units (the executor's a system service, the
# delegator's a user service) and the example settings. An existing
# /etc/awcp/awcp-fs.toml is kept. DESTDIR stages the tree for a package.
PREFIX  ?= /usr/local
DESTDIR ?=
install: build
	install -D -m 0755 $(BIN)/awcp-ctl $(DESTDIR)$(PREFIX)/bin/awcp-ctl
	install -D -m 0755 $(BIN)/awcp-fs $(DESTDIR)$(PREFIX)/bin/awcp-fs
	install -d -m 0755 $(DESTDIR)/etc/systemd/system $(DESTDIR)/etc/systemd/user $(DESTDIR)$(PREFIX)/share/awcp
	sed 's|/usr/local|$(PREFIX)|g' deploy/systemd/awcp-fs.service > $(DESTDIR)/etc/systemd/system/awcp-fs.service
	sed 's|/usr/local|$(PREFIX)|g' deploy/systemd/awcp-ctl.service > $(DESTDIR)/etc/systemd/user/awcp-ctl.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/awcp-fs.service $(DESTDIR)/etc/systemd/user/awcp-ctl.service
	install -m 0644 deploy/awcp-fs.toml deploy/awcp-ctl.toml $(DESTDIR)$(PREFIX)/share/awcp/
	[ -e $(DESTDIR)/etc/awcp/awcp-fs.toml ] || install -D -m 0600 deploy/awcp-fs.toml $(DESTDIR)/etc/awcp/awcp-fs.toml

# The delegator as a launchd agent of the user's own (macOS): the plist in
# ~/Library/LaunchAgents, the log directory, and the example settings in
# ~/.config/awcp unless some are there already. Run as the user, after
# the program is installed under PREFIX (docs/macos.md).
install-launchd:
	install -d -m 0755 $(HOME)/Library/LaunchAgents
	install -d -m 0700 $(HOME)/Library/Logs/awcp $(HOME)/.config/awcp
	sed -e 's|__PREFIX__|$(PREFIX)|g' -e 's|__HOME__|$(HOME)|g' deploy/launchd/dev.awcp.awcp-ctl.plist > $(HOME)/Library/LaunchAgents/dev.awcp.awcp-ctl.plist
	chmod 0644 $(HOME)/Library/LaunchAgents/dev.awcp.awcp-ctl.plist
	[ -e $(HOME)/.config/awcp/awcp-ctl.toml ] || install -m 0600 deploy/awcp-ctl.toml $(HOME)/.config/awcp/awcp-ctl.toml

clean:
	rm -rf $(BIN)
