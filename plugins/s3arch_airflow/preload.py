"""What every archive task imports, imported once by each Celery worker before it forks the
task processes (``celery_config``): a task process then starts with the engine, the amazon
provider's S3 hook and botocore's S3 model in memory, and its DAG parse finds the DAG
factory already imported, instead of each task loading them again.

Importing creates no thread, socket or CRT object: a fork after it is safe.
"""

import airflow.providers.amazon.aws.hooks.s3  # noqa: F401
import s3arch.archive  # noqa: F401
import s3arch.ops.sizing  # noqa: F401
import s3arch.restore.extract  # noqa: F401
import s3arch_airflow.factory  # noqa: F401
from s3arch.io.botocore_hooks import preload_s3_model

preload_s3_model()
