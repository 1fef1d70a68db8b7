"""voxledger.flows"""
