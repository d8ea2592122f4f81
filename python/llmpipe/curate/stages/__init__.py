"""One small class per stage; the pipeline order lives in llmpipe.curate.registry."""
