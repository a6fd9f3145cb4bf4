"""spark_connector"""
