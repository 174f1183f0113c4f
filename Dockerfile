# memstream's production image: the same package as the embedded default.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY memstream ./memstream
COPY streams ./streams
COPY processors ./processors
COPY sinks ./sinks
COPY core ./core
RUN pip install --no-cache-dir . && useradd --system memstream && mkdir -p /var/lib/memstream \
    && chown memstream /var/lib/memstream
USER memstream
EXPOSE 8080
CMD ["memstream", "node"]
