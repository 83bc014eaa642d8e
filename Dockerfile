# The mountwarden image, for users with a Docker engine: `mountwarden operator` and `mountwarden agent` (the chart runs
# both from it).
#   docker build -t mountwarden:0.1.0 .
# A thin wrapper over `make image`: the build stage runs the same build (mountwarden.lab.appimage) from the same two
# locks, hack/image/debian.lock (every Debian package, its version and its .deb's sha256) and
# requirements/runtime.txt (every wheel and its hashes), and unpacks its layers into /rootfs; the image is that
# root and the configuration `make image` writes. tests/unit/test_image.py holds this file to that build.
# `make image` needs no Docker engine and gives the same root the same digest on every machine.

ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# The build's tools only (apt-get download and dpkg-deb come with the base); none of them goes into the image.
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv
WORKDIR /src
COPY requirements/runtime.txt requirements/build.txt requirements/
RUN python3 -m venv /venv \
 && /venv/bin/pip install --require-hashes --no-deps -r requirements/runtime.txt -r requirements/build.txt
COPY pyproject.toml README.md LICENSE ./
COPY hack/image/debian.lock hack/image/
COPY operator/ operator/
RUN PYTHONPATH=/src/operator /venv/bin/python -m mountwarden image build --rootfs /rootfs

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /
LABEL org.opencontainers.image.title=mountwarden org.opencontainers.image.version=0.1.0 org.opencontainers.image.licenses=Apache-2.0
ENTRYPOINT ["/usr/local/bin/mountwarden"]
CMD ["--help"]
