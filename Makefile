# Two commands: `make run` starts Magnetar, `make test` runs every check. Both idempotent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
DATA_DIR ?= data
# Debian's ZooKeeper: the cluster metadata store's tests run a real one (one per test run).
ZOOKEEPER_JAR := /usr/share/java/zookeeper.jar
PYTEST_ARGS ?=

.PHONY: run test lint typecheck unit bench proto clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --disable-pip-version-check -q --upgrade pip
	$(BIN)/pip install --disable-pip-version-check -q -e '.[test]' --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/magnetar standalone --data-dir $(DATA_DIR)

lint: $(STAMP)
	$(BIN)/ruff check magnetar tests bench
	$(BIN)/ruff format --check magnetar tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

$(ZOOKEEPER_JAR):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper

# Debian's chromium and its driver: the web console's tests drive a real headless browser.
CHROMEDRIVER := /usr/bin/chromedriver
$(CHROMEDRIVER):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver

unit: $(STAMP) $(ZOOKEEPER_JAR) $(CHROMEDRIVER)
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/storage.py

# Regenerate the Pulsar protocol module from magnetar/protocols/pulsar/pulsar_api.proto.
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Imagnetar/protocols/pulsar \
		--python_out=magnetar/protocols/pulsar/_proto \
		--pyi_out=magnetar/protocols/pulsar/_proto magnetar/protocols/pulsar/pulsar_api.proto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
