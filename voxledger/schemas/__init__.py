"""voxledger.schemas"""
