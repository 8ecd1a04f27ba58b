"""A batch from start to finish: submissions found and read, graded on this machine or a Dask cluster,
resumed or sharded, each result written before the next is started."""
