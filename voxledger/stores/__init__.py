"""voxledger.stores"""
