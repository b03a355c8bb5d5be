# A container that mirrors the make bootstrap (`make env model`), for reviewers who prefer one.
# The tested path is make on the host (ARTIFACT.md); this file follows it step for step.
#   docker build -t agentic-kvc .
#   docker run --rm -it agentic-kvc make kick-the-tires
FROM python:3.11-slim-bookworm

# redis-server and chromium: what the Makefile's $(STAMPS)/system installs for the tests (the
# Redis-backed proxy state and the JupyterLab browser test).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends make git build-essential redis-server chromium \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /agentic_kvc
COPY . .
# The same steps as the Makefile's $(STAMPS)/venv and $(STAMPS)/model targets, stamped, so
# `make` inside the container finds the environment built.
RUN make PYTHON=python3.11 env model

CMD ["make", "help"]
