# The mountwarden image: `mountwarden operator` and `mountwarden agent` (the chart runs both from it).
#   docker build -t mountwarden:0.1.0 .
# Stage 1 fetches the locked wheels of every dependency (requirements/runtime.txt, hashes checked) and builds
# the project's wheel with the locked build backend; stage 2 installs them, and nothing else, into a clean
# base, and runs as a non-root user (the agent's pod spec runs it as root when it must read other processes'
# files).

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements/runtime.txt requirements/build.txt requirements/
# Wheels only: a wheel built here from an sdist would not match the lock's hashes.
RUN pip download --require-hashes --no-deps --only-binary=:all: --dest /wheels -r requirements/runtime.txt \
 && pip install --require-hashes --no-deps -r requirements/build.txt \
 && cp requirements/runtime.txt /wheels/
COPY pyproject.toml README.md LICENSE ./
COPY operator/ operator/
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# A named user (getpass and kopf's peer identity look the uid up), no home, no shell.
RUN groupadd --system --gid 65532 mountwarden \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin mountwarden
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels --require-hashes --no-deps -r /wheels/runtime.txt \
 && pip install --no-index --find-links=/wheels --no-deps mountwarden
USER 65532:65532
ENTRYPOINT ["mountwarden"]
CMD ["--help"]
