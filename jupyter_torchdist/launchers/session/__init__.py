"""The Spark session and its JVM: the notebook's own session, the embedded one (its start, warm-up, giving way to the
notebook's, idle release), the executors' Python daemon path, the standalone master's view and Spark's TLS consent."""
