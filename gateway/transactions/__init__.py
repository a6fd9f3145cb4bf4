"""Transactions (issue 23): where transaction states are kept. Not yet served."""
