# The image behind compose.yaml's api, worker-* and flower services.
# tests/test_image.py builds the wheel from exactly what this file copies, installs it into a
# fresh venv and starts `ldims api` from it; it also runs hadolint on this file (.hadolint.yaml).
FROM python:3.11-slim
WORKDIR /app
# Tesseract's language data for OCR (the engine itself ships in the tesserocr wheel).
RUN apt-get update && apt-get install -y --no-install-recommends \
        tesseract-ocr-eng tesseract-ocr-rus tesseract-ocr-chi-sim tesseract-ocr-osd \
    && rm -rf /var/lib/apt/lists/*
# Every package pyproject.toml lists ([tool.setuptools.packages.find]); runtime holds the
# `ldims` command itself.
COPY pyproject.toml README.md ./
COPY ldims ldims
COPY api api
COPY workers workers
COPY indexer indexer
COPY runtime runtime
RUN pip install --no-cache-dir . && useradd --system --uid 10001 ldims && mkdir /data && chown ldims /data
# By number: a name may not resolve on the host (Kubernetes' runAsNonRoot checks the number).
USER 10001
ENV LDIMS_DATA_DIR=/data
EXPOSE 8000
CMD ["ldims", "api", "--host", "0.0.0.0", "--port", "8000"]
