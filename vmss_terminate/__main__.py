from vmss_terminate.cli import main

main(prog_name="vmss-terminate")
