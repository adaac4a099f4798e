# One image for both commands: rightsizer-exporter (one per GPU node) and rightsizer-adapter.
#   docker build -t ghcr.io/rightsizer/rightsizer:0.1.0 \
#     --build-arg VERSION=$(python3 -c 'import tomllib;print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])') \
#     --build-arg REVISION=$(git rev-parse --short HEAD) .
#   docker run --rm -p 9430:9430 ghcr.io/rightsizer/rightsizer:0.1.0 rightsizer-exporter --simulate
#   docker run --rm -p 6443:6443 ghcr.io/rightsizer/rightsizer:0.1.0 rightsizer-adapter --exporter http://host:9430
#
# Stage 1 installs the project and its dependencies (all published as wheels) into a virtual
# environment; stage 2 copies only that environment onto a fresh slim Python, so pip's caches,
# setuptools' build tree and the sources stay behind; pip and setuptools themselves are removed from
# the environment, which runs without them. Neither stage has a compiler.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The image's version label is the package's: the default is pyproject.toml's version (a test keeps
# them equal), the build line above passes it, and the build stage refuses any other. REVISION is
# the commit the image is built from.
ARG VERSION=0.1.0
ARG REVISION=unknown

FROM ${PYTHON_IMAGE} AS build
ARG VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY adapter ./adapter
COPY rightsizer_core ./rightsizer_core
COPY rightsizing ./rightsizing
RUN python -m venv /opt/rightsizer \
    && /opt/rightsizer/bin/pip install --no-cache-dir . \
    && /opt/rightsizer/bin/python -m pip uninstall --yes pip setuptools \
    && test "$(/opt/rightsizer/bin/rightsizer-exporter --version)" = "rightsizer-exporter ${VERSION}"

FROM ${PYTHON_IMAGE}
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="rightsizer" \
      org.opencontainers.image.description="GPU right-sizing from measurement: a dcgm-exporter-compatible exporter with right-sizing scores, and a scaling-signal adapter for HPA and KEDA" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# A numeric, unprivileged user so Kubernetes can verify runAsNonRoot. The exporter's DaemonSet
# runs as root only where the kubelet's pod-resources socket demands it (see deploy/).
RUN groupadd --system --gid 10001 rightsizer \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rightsizer
COPY --from=build /opt/rightsizer /opt/rightsizer
ENV PATH=/opt/rightsizer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# 9430: exporter /metrics; 6443: adapter HTTPS (Kubernetes metrics APIs, KEDA metrics-api);
# 9443: adapter KEDA external scaler (gRPC).
EXPOSE 9430 6443 9443
CMD ["rightsizer-exporter"]
