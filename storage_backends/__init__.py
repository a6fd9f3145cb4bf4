"""storage_backends"""
