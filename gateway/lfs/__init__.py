"""Large File Support: upload sessions, pointer checks on produce, the clean-up (docs/lfs.md)."""

from .service import LfsRecordsRefused, LfsRefused, LfsService, Upload

__all__ = ["LfsService", "LfsRefused", "LfsRecordsRefused", "Upload"]
