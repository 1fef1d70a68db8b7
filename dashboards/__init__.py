"""voxledger.dashboards"""
