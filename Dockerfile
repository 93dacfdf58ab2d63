# The image behind compose.yaml's api, worker-* and flower services.
FROM python:3.11-slim
WORKDIR /app
# Tesseract's language data for OCR (the engine itself ships in the tesserocr wheel).
RUN apt-get update && apt-get install -y --no-install-recommends \
        tesseract-ocr-eng tesseract-ocr-rus tesseract-ocr-chi-sim tesseract-ocr-osd \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY ldims ldims
COPY api api
COPY workers workers
COPY indexer indexer
RUN pip install --no-cache-dir . && useradd --system --uid 10001 ldims && mkdir /data && chown ldims /data
USER ldims
ENV LDIMS_DATA_DIR=/data
EXPOSE 8000
CMD ["ldims", "api", "--host", "0.0.0.0", "--port", "8000"]
