"""What every tool shares: argument checking, the paging envelope, gallery items, citations."""
