"""Example DAG files (copy one into your DAGs folder, or point ``dags_folder`` here)."""
