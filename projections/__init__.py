"""The read side: pure folds per projection, their SQL writers, read queries and replay."""
