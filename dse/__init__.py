"""dse: design-space exploration of hybrid CNN partitionings across edge devices."""
